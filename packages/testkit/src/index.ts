export { natsPassword, natsUrl, redisUrl, uniquePrefix } from './env.ts';
export { type LogLine, RecordingLogger } from './recording-logger.ts';
export {
  type FreezableServer,
  freePort,
  type NatsCluster,
  type NatsClusterNode,
  type NatsServerOptions,
  type RedisCluster,
  type RedisClusterNode,
  type RedisSentinelGroup,
  type RestartableRedisServer,
  type RestartableServer,
  startNatsCluster,
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
export { waitFor } from './wait.ts';
