export { natsUrl, redisUrl, uniquePrefix } from './env.ts';
export {
  freePort,
  type RestartableServer,
  startNatsServer,
  startRedisServer,
  startRestartableNatsServer,
  type TestServer,
  TestServerError,
  waitForPort,
} from './servers.ts';
