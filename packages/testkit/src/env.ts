import { randomBytes } from 'node:crypto';

/** Redis URL for integration tests: `REDIS_URL`, set by the user or by the test kit's global setup. */
export function redisUrl(): string {
  const url = process.env.REDIS_URL;
  if (!url) {
    throw new Error(
      'REDIS_URL is not set and the test kit could not start redis-server: install it (apt-get install -y redis-server) or set REDIS_URL',
    );
  }
  return url;
}

/** NATS URL for integration tests: `NATS_URL`, set by the user or by the test kit's global setup. */
export function natsUrl(): string {
  const url = process.env.NATS_URL;
  if (!url) {
    throw new Error(
      'NATS_URL is not set and the test kit could not start nats-server: install it (apt-get install -y nats-server) or set NATS_URL',
    );
  }
  return url;
}

/** A random key or subject prefix, unique per test, so tests never see each other's state. */
export function uniquePrefix(label = 't'): string {
  return `${label}-${randomBytes(6).toString('hex')}`;
}

/**
 * A random password a `nats-server` config can take from the environment (`password: $VAR`): it
 * starts with letters, because the server parses the value as a token and one that starts with a
 * digit or "-" may read as a number, and then it exits.
 */
export function natsPassword(): string {
  return `fw${randomBytes(18).toString('hex')}`;
}
