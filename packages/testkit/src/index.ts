export { natsUrl, redisUrl, uniquePrefix } from './env.ts';
export {
  freePort,
  type RestartableRedisServer,
  startNatsServer,
  startRedisServer,
  startRestartableRedisServer,
  type TestServer,
  TestServerError,
  waitForPort,
} from './servers.ts';
