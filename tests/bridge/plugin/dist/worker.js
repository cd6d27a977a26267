// A sandbox provider's worker on the host's SDK: what it implements is what the SDK reports in
// initialize's supportedMethods. It logs to stderr once per setup, so a test can count them.
import { definePlugin, runWorker } from "@paperclipai/plugin-sdk";

const plugin = definePlugin({
  async setup(ctx) {
    process.stderr.write(`setup ran in pid ${process.pid}\n`);
    // A call into the host: the bridge is not a host, so it is refused, and setup goes on.
    try {
      await ctx.state.get({ scopeKind: "instance", stateKey: "probe" });
      process.stderr.write("the host answered state.get\n");
    } catch (err) {
      process.stderr.write(`the host refused state.get: code ${err?.code}\n`);
    }
  },
  async onHealth() {
    return { status: "ok" };
  },
  async onEnvironmentValidateConfig() {
    return { ok: true };
  },
  async onEnvironmentProbe() {
    return { ok: true };
  },
  async onEnvironmentAcquireLease() {
    return { providerLeaseId: "lease-1" };
  },
  async onEnvironmentReleaseLease() {},
  async onEnvironmentDestroyLease() {},
  async onEnvironmentExecute() {
    return { exitCode: 0, stdout: "", stderr: "" };
  },
  async onEnvironmentSyncIn() {},
  async onEnvironmentSyncOut() {},
});

export default plugin;
runWorker(plugin, import.meta.url);
