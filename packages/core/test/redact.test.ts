import { describe, expect, it } from 'vitest';
import { redactUrls } from '../src/redaction.ts';

describe('redactUrls', () => {
  it('masks passwords and tokens in every URL of a text, keeping the rest readable', () => {
    expect(redactUrls('nats://svc:hunter2@nats:4222')).toBe('nats://svc:***@nats:4222');
    expect(redactUrls('redis://:hunter2@redis:6379/0')).toBe('redis://:***@redis:6379/0');
    expect(redactUrls('nats://tok3n@h1:4222,nats://u:p@h2:4222')).toBe(
      'nats://***@h1:4222,nats://u:***@h2:4222',
    );
    expect(redactUrls('cannot connect to nats://a:b@h: Authorization Violation')).toBe(
      'cannot connect to nats://a:***@h: Authorization Violation',
    );
    expect(redactUrls('http://127.0.0.1:8000/v1')).toBe('http://127.0.0.1:8000/v1');
  });
});
