// The host's side of tests/host (cargo test --test host): its published resolver and manifest
// validator, as @paperclipai/server and @paperclipai/shared 2026.916.1 ship them.
//
// node host.mjs INSTALL_DIR < cases.json > answers.json
//
// INSTALL_DIR holds the node_modules that tests/host/package-lock.json installs. stdin is
// {"resolve": [case...], "manifest": [driver...]}; stdout {"resolve": [...], "manifest": [...]},
// one answer per input, in order. Nothing here decides a capability: every answer is the
// host's own functions' (classifyEnvironmentCapabilities, buildSandboxCapabilityNarrowing,
// resolveDeclaredSandboxCapabilities, pluginManifestV1Schema), composed as the sandbox
// driver's resolveSandboxCapabilitiesForLease composes them.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const root = process.argv[2];
if (!root) {
  console.error("usage: node host.mjs INSTALL_DIR < cases.json");
  process.exit(2);
}
const load = (path) => import(pathToFileURL(join(root, "node_modules", path)).href);
const runtime = await load("@paperclipai/server/dist/services/environment-runtime.js");
const shared = await load("@paperclipai/shared/dist/index.js");
const { pluginManifestV1Schema, pluginEnvironmentDriverDeclarationSchema, resolveDeclaredSandboxCapabilities } = shared;
const { classifyEnvironmentCapabilities, buildSandboxCapabilityNarrowing, ENVIRONMENT_DRIVER_CAPABILITY_SUPPORT } =
  runtime;
const supportedCapabilities = ENVIRONMENT_DRIVER_CAPABILITY_SUPPORT.sandbox.supportedCapabilities;

const versionOf = (name) =>
  JSON.parse(readFileSync(join(root, "node_modules", name, "package.json"), "utf8")).version;

// One lease of a plugin-backed sandbox provider, as resolveSandboxCapabilitiesForLease resolves
// it: the exact pinned plugin must still declare the driver with kind sandbox_provider, else
// every capability is off (verified nothing, declared nothing); otherwise the stored manifest's
// driver (the schema's output) is the declaration, the live worker's supportedMethods the
// verified methods, and the lease's policy, metadata and config outcome the narrowing.
function resolve(c) {
  const stored = pluginEnvironmentDriverDeclarationSchema.safeParse(c.driver);
  if (!stored.success) {
    return { error: `the host's schema refuses the driver: ${stored.error.message}` };
  }
  const driver = stored.data;
  if (!c.pinnedPluginDeclaresDriver || driver.kind !== "sandbox_provider") {
    return classifyEnvironmentCapabilities({ verifiedMethods: [], declared: null, narrowing: null, supportedCapabilities });
  }
  const narrowing = buildSandboxCapabilityNarrowing({
    leasePolicy: c.leasePolicy,
    leaseMetadata: c.leaseMetadata,
    configResolutionFailed: c.configResolutionFailed,
  });
  return classifyEnvironmentCapabilities({
    verifiedMethods: c.verifiedMethods,
    declared: resolveDeclaredSandboxCapabilities(driver),
    narrowing,
    supportedCapabilities,
  });
}

// One driver in a manifest that is otherwise valid: does the host's manifest validator admit
// it, and if not, at which paths (under environmentDrivers[0]).
function manifest(driver) {
  const m = {
    id: "sandcap.host-differential",
    apiVersion: 1,
    version: "1.0.0",
    displayName: "Differential",
    description: "One generated driver.",
    author: "sandcap tests",
    categories: ["automation"],
    capabilities: ["environment.drivers.register"],
    entrypoints: { worker: "./dist/worker.js" },
    environmentDrivers: [driver],
  };
  const r = pluginManifestV1Schema.safeParse(m);
  if (r.success) {
    return { admitted: true, stored: r.data.environmentDrivers[0] };
  }
  const issues = r.error.issues.map((i) => ({
    path: i.path.join("."),
    code: i.code,
    keys: i.keys ?? [],
    message: i.message,
  }));
  return { admitted: false, issues };
}

let text = "";
for await (const chunk of process.stdin) text += chunk;
const input = JSON.parse(text);
const out = {
  versions: { server: versionOf("@paperclipai/server"), shared: versionOf("@paperclipai/shared"), node: process.version },
  resolve: (input.resolve ?? []).map(resolve),
  manifest: (input.manifest ?? []).map(manifest),
};
// Written whole (the callback runs once it is flushed): the server's module graph starts timers and pools of its own on
// import, so the process exits here rather than when they end.
await new Promise((done) => process.stdout.write(JSON.stringify(out), done));
process.exit(0);
