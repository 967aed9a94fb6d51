export { natsPassword, natsUrl, redisUrl, uniquePrefix } from './env.ts';
export { type LogLine, RecordingLogger } from './recording-logger.ts';
export {
  freePort,
  type NatsServerOptions,
  type RedisCluster,
  type RedisClusterNode,
  type RedisSentinelGroup,
  type RestartableRedisServer,
  type RestartableServer,
  startNatsServer,
  startRedisCluster,
  startRedisSentinelGroup,
  startRedisServer,
  startRestartableNatsServer,
  startRestartableRedisServer,
  type TestServer,
  TestServerError,
  waitForPort,
} from './servers.ts';
