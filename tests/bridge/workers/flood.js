// Answers initialize, then writes log notifications on stdout as fast as it can.
import { answerInitialize, onMessages, recordStart } from "./common.js";
recordStart();
const line = `${JSON.stringify({ jsonrpc: "2.0", method: "log", params: { level: "info", message: "x".repeat(200) } })}\n`;
const chunk = line.repeat(256);
function flood() {
  while (process.stdout.write(chunk)) {}
  process.stdout.once("drain", flood);
}
onMessages((message) => {
  if (answerInitialize(message)) setTimeout(flood, 200);
});
