export { natsUrl, redisUrl, uniquePrefix } from './env.ts';
export {
  freePort,
  type RedisSentinelGroup,
  type RestartableRedisServer,
  type RestartableServer,
  startNatsServer,
  startRedisSentinelGroup,
  startRedisServer,
  startRestartableNatsServer,
  startRestartableRedisServer,
  type TestServer,
  TestServerError,
  waitForPort,
} from './servers.ts';
