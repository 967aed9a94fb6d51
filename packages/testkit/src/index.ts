export { natsUrl, redisUrl, uniquePrefix } from './env.ts';
export {
  freePort,
  startNatsServer,
  startRedisServer,
  type TestServer,
  TestServerError,
  waitForPort,
} from './servers.ts';
