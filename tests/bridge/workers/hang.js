// Reads initialize and never answers it.
import { onMessages, recordStart } from "./common.js";
recordStart();
onMessages(() => {});
setInterval(() => {}, 60_000);
