// What the misbehaving test workers share: a record of each start next to the worker (the
// bridge gives a worker no environment to say where), and the SDK's stdio framing.
import { appendFileSync } from "node:fs";
import { createInterface } from "node:readline";

export function recordStart() {
  appendFileSync(new URL("./starts.log", import.meta.url), `${Date.now()} ${process.pid}\n`);
}

export function record(name, text) {
  appendFileSync(new URL(`./${name}`, import.meta.url), `${text}\n`);
}

/** Calls `onMessage` with every JSON line the bridge writes on stdin. */
export function onMessages(onMessage) {
  createInterface({ input: process.stdin }).on("line", (line) => onMessage(JSON.parse(line)));
}

export function send(message) {
  process.stdout.write(`${JSON.stringify(message)}\n`);
}

export function answerInitialize(message, methods = ["environmentExecute"]) {
  if (message.method === "initialize") {
    send({ jsonrpc: "2.0", id: message.id, result: { ok: true, supportedMethods: methods } });
    return true;
  }
  return false;
}
