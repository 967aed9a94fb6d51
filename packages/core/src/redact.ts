/**
 * Secrets must not reach logs or error messages, and connection URLs are where they hide
 * (`nats://user:pass@host`, `redis://:pass@host`).
 */

const USERINFO = /([A-Za-z][A-Za-z0-9+.-]*:\/\/)([^/?#@\s]*)@/g;

/**
 * `text` with the credentials of every URL in it masked: `nats://user:pass@host` becomes
 * `nats://user:***@host`, and a URL with a user part only (NATS reads it as a token) becomes
 * `nats://***@host`. Works on lists (`nats://a:b@h1,nats://h2`) and on messages that quote URLs.
 */
export function redactUrls(text: string): string {
  return text.replace(USERINFO, (_m, scheme: string, info: string) => {
    const colon = info.indexOf(':');
    return colon < 0 ? `${scheme}***@` : `${scheme}${info.slice(0, colon)}:***@`;
  });
}
