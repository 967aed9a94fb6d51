// Loaded with `node --import` ahead of the CLI: records the URL of every module the process loads
// (one per line, in the file named by FAIRWAY_TEST_MODULE_LOG), so a test can see what a command
// pulled in. Registered before tsx, these hooks still see the TypeScript sources tsx compiles.
import { register } from 'node:module';

register('./record-modules-hooks.mjs', import.meta.url);
