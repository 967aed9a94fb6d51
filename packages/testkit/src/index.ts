export { natsUrl, redisUrl, uniquePrefix } from './env.ts';
export {
  freePort,
  type RedisSentinelGroup,
  type RestartableRedisServer,
  startNatsServer,
  startRedisSentinelGroup,
  startRedisServer,
  startRestartableRedisServer,
  type TestServer,
  TestServerError,
  waitForPort,
} from './servers.ts';
