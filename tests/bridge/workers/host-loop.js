// Answers initialize, then calls into the host in a loop, each call awaiting the answer to the
// one before, a few hundred a second; it records how many were answered, and with which codes.
import { answerInitialize, onMessages, record, recordStart, send } from "./common.js";
recordStart();
let next = 100;
const codes = new Map();
let answered = 0;
function call() {
  send({ jsonrpc: "2.0", id: next++, method: "secrets.resolve", params: { secretRef: "s" } });
}
onMessages((message) => {
  if (answerInitialize(message, ["environmentExecute", "environmentSyncIn"])) return call();
  if (message.method) return send({ jsonrpc: "2.0", id: message.id, result: { status: "ok" } });
  answered += 1;
  const code = message.error?.code ?? "none";
  codes.set(code, (codes.get(code) ?? 0) + 1);
  setTimeout(call, 2);
});
setInterval(() => record("calls.log", JSON.stringify({ answered, codes: Object.fromEntries(codes) })), 500);
