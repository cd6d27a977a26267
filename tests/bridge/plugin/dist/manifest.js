// The plugin's manifest, as a built plugin ships it: an ES module whose default export the host
// imports and validates (pluginManifestV1Schema), and sandcap bridge too.
export default {
  id: "sandcap.bridge-test",
  apiVersion: 1,
  version: "0.3.1",
  displayName: "Bridge test provider",
  description: "A sandbox provider for sandcap bridge's tests: it implements a few environment methods.",
  author: "sandcap",
  categories: ["automation"],
  capabilities: ["environment.drivers.register"],
  entrypoints: { worker: "./dist/worker.js" },
  environmentDrivers: [
    {
      driverKey: "bridge-test",
      kind: "sandbox_provider",
      displayName: "Bridge test sandbox",
      sandboxCapabilities: { nativeSyncIn: true, nativeSyncOut: true, persistentProcessSessions: false },
      configSchema: { type: "object", properties: { region: { type: "string" } } },
    },
  ],
};
