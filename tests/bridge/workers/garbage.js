// Writes lines that are not JSON-RPC (as a stray console.log would) before it answers initialize.
import { answerInitialize, onMessages, recordStart } from "./common.js";
recordStart();
onMessages((message) => {
  for (let i = 0; i < 100; i++) console.log(`debug output ${i}`);
  answerInitialize(message);
});
