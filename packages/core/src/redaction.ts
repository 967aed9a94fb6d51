/** What a redacted secret is replaced with. */
export const REDACTED = '***';

// scheme://userinfo@ — userinfo is "user:password" or a bare token (nats://<token>@host).
const URL_USERINFO = /\b([a-z][a-z0-9+.-]*:\/\/)([^\s/?#@]+)@/gi;
// ?password=…, &token=…, auth_token, api_key, secret, … in URLs and query-like text.
const SECRET_PARAM =
  /([?&;](?:[a-z0-9_-]*(?:pass(?:word)?|pwd|token|secret|api[_-]?key|auth|credentials?|nkey|seed)[a-z0-9_-]*)=)[^&\s#"']+/gi;
// Authorization: Bearer <token> / Basic <creds>, in headers or messages.
const AUTH_SCHEME = /\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]+/g;

/**
 * `text` with the credentials of every URL in it masked: `nats://user:pass@host` becomes
 * `nats://user:***@host`, and a URL with a user part only (NATS reads it as a token) becomes
 * `nats://***@host`. Works on lists (`nats://a:b@h1,nats://h2`) and on messages that quote URLs.
 */
export function redactUrls(text: string): string {
  return text.replace(URL_USERINFO, (_m, scheme: string, info: string) => {
    const colon = info.indexOf(':');
    return colon < 0 ? `${scheme}${REDACTED}@` : `${scheme}${info.slice(0, colon)}:${REDACTED}@`;
  });
}

/**
 * A URL or any text with its secrets replaced by `***`: URL passwords (and bare userinfo, which is
 * a token for NATS: {@link redactUrls}), secret-looking query parameters, and `Bearer` / `Basic`
 * credentials. The one redaction of fairway: loggers, error messages and start-up banners go
 * through it, so a `redis://:password@host` or a `nats://user:pass@host` never reaches a log line.
 */
export function redactSecrets(text: string): string {
  // Every pattern needs one of these; most strings a log line carries (ids, routes, names) have
  // none, and skip the three scans.
  if (!text.includes(':') && !text.includes('=') && !text.includes('Bearer') && !text.includes('Basic'))
    return text;
  return redactUrls(text).replace(SECRET_PARAM, `$1${REDACTED}`).replace(AUTH_SCHEME, `$1 ${REDACTED}`);
}

/**
 * Field names whose values are secrets whatever they hold; loggers replace them, at the top level,
 * one level down and in a nested object's `headers`.
 */
export const SECRET_FIELDS: readonly string[] = [
  'authorization',
  'password',
  'pass',
  'token',
  'apiKey',
  'api_key',
  'key',
  'secret',
  'seed',
  'credentials',
];
