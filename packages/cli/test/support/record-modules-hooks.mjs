// Module hooks of record-modules.mjs: they run on the loader's own thread, hence a synchronous append.
import { appendFileSync } from 'node:fs';

export async function load(url, context, nextLoad) {
  const log = process.env.FAIRWAY_TEST_MODULE_LOG;
  if (log) appendFileSync(log, `${url}\n`);
  return nextLoad(url, context);
}
