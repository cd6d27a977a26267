// Leaves processes behind: a detached one in a session of its own (out of the worker's process
// group), and an orphan that exits at once (a zombie for whoever inherits it); answers initialize,
// then exits after a second so that the bridge restarts it.
import { spawn } from "node:child_process";
import { onMessages, answerInitialize, record, recordStart } from "./common.js";
recordStart();
const detached = spawn("sleep", ["600"], { detached: true, stdio: "ignore" });
detached.unref();
record("detached.log", `${detached.pid}`);
spawn("sh", ["-c", "sleep 0.2 & exit 0"], { stdio: "ignore" }).unref();
onMessages((message) => answerInitialize(message));
setTimeout(() => process.exit(0), 1000);
