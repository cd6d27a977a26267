// Answers initialize with a line of 2 MiB.
import { onMessages, recordStart } from "./common.js";
recordStart();
onMessages((message) => {
  const padding = "x".repeat(2 * 1024 * 1024);
  process.stdout.write(`${JSON.stringify({ jsonrpc: "2.0", id: message.id, result: { ok: true, supportedMethods: [], padding } })}\n`);
});
