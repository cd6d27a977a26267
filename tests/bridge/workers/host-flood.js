// Answers initialize, then calls into the host without ever reading the answers.
import { answerInitialize, onMessages, recordStart, send } from "./common.js";
recordStart();
let next = 100;
let reading = true;
onMessages((message) => {
  if (!reading) return;
  if (answerInitialize(message)) {
    reading = false;
    process.stdin.pause();
    setInterval(() => {
      for (let i = 0; i < 50; i++) send({ jsonrpc: "2.0", id: next++, method: "state.get", params: { k: "x".repeat(2000) } });
    }, 100);
  }
});
