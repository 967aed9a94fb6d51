export { natsUrl, redisUrl, uniquePrefix } from './env.ts';
export { type LogLine, RecordingLogger } from './recording-logger.ts';
export {
  freePort,
  type NatsServerOptions,
  startNatsServer,
  startRedisServer,
  type TestServer,
  TestServerError,
  waitForPort,
} from './servers.ts';
