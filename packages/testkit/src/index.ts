export { natsUrl, redisUrl, uniquePrefix } from './env.ts';
export { type LogLine, RecordingLogger } from './recording-logger.ts';
export {
  freePort,
  type NatsServerOptions,
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
