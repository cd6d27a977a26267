// Exits at once, every time: the bridge restarts it with backoff.
import { recordStart } from "./common.js";
recordStart();
process.exit(3);
