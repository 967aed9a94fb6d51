import type { Rng } from '@fairway/core';

/** A request sent through an HTTP client (well-formed HTTP, hostile content). */
export interface HttpCase {
  readonly kind: 'http';
  readonly label: string;
  readonly method: string;
  readonly path: string;
  readonly headers: Record<string, string | string[]>;
  readonly body?: Buffer;
}

/** Bytes written straight to a socket (malformed HTTP: injection, smuggling, bad framing). */
export interface RawCase {
  readonly kind: 'raw';
  readonly label: string;
  readonly bytes: Buffer;
}

export type HostileCase = HttpCase | RawCase;

/** What the generator needs to know about the dispatcher under attack. */
export interface Target {
  readonly model: string;
  /** A valid key of the attacking tenant (so validation, not auth, is what rejects). */
  readonly attackerKey: string;
  /** A valid key of the attacker bound to an app (so claiming another app is a 403). */
  readonly attackerAppKey: string;
  /** The other tenant's key, which header injection must never let anyone borrow. */
  readonly victimKey: string;
  /** Bodies larger than this are refused (413). */
  readonly bodyLimitBytes: number;
}

const CHAT = '/v1/chat/completions';
const COMPLETIONS = '/v1/completions';

function pick<T>(rng: Rng, xs: readonly T[]): T {
  return xs[rng.int(0, xs.length - 1)] as T;
}

function randomString(rng: Rng, n: number, alphabet = 'abcdefghijklmnopqrstuvwxyz0123456789 '): string {
  let s = '';
  for (let i = 0; i < n; i++) s += alphabet[rng.int(0, alphabet.length - 1)];
  return s;
}

function json(
  headers: Record<string, string | string[]>,
  key: string | undefined,
): Record<string, string | string[]> {
  return {
    'content-type': 'application/json',
    ...(key !== undefined ? { authorization: `Bearer ${key}` } : {}),
    ...headers,
  };
}

/**
 * Seeded generator of requests a dispatcher must refuse with a 4xx: every case carries at least
 * one defect that makes it invalid whatever else the mutation did — bad or missing keys,
 * malformed JSON (a mutated strict prefix of a valid body, never valid JSON), wrong types and
 * out-of-range numbers, huge strings and bodies, deep nesting, invalid UTF-8, bad headers and
 * header injection, wrong content types, bad methods and paths, and malformed HTTP on a raw
 * socket. The same seed gives the same cases.
 */
export class HostileCases {
  readonly #rng: Rng;
  readonly #t: Target;

  constructor(rng: Rng, target: Target) {
    this.#rng = rng;
    this.#t = target;
  }

  /** A valid chat body; each case breaks it in one or more ways. */
  validChat(): Record<string, unknown> {
    return {
      model: this.#t.model,
      messages: [{ role: 'user', content: randomString(this.#rng, this.#rng.int(1, 40)) }],
      max_tokens: this.#rng.int(1, 16),
      ...(this.#rng.next() < 0.3 ? { stream: true } : {}),
    };
  }

  /** The next hostile request. */
  next(): HostileCase {
    const r = this.#rng.next();
    if (r < 0.12) return this.#badAuth();
    if (r < 0.3) return this.#malformedJson();
    if (r < 0.55) return this.#wrongField();
    if (r < 0.6) return this.#invalidUtf8();
    if (r < 0.645) return this.#deepNesting();
    if (r < 0.66) return this.#huge();
    if (r < 0.74) return this.#badHeader();
    if (r < 0.8) return this.#contentType();
    if (r < 0.88) return this.#methodOrPath();
    return this.#raw();
  }

  #http(label: string, body: unknown, headers: Record<string, string | string[]>, path = CHAT): HttpCase {
    return {
      kind: 'http',
      label,
      method: 'POST',
      path,
      headers,
      body: Buffer.isBuffer(body)
        ? body
        : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body)),
    };
  }

  #badAuth(): HttpCase {
    const rng = this.#rng;
    const body = this.validChat();
    const variants: [string, Record<string, string | string[]>][] = [
      ['no key', json({}, undefined)],
      ['unknown key', json({}, `sk-${randomString(rng, 32, 'abcdef0123456789')}`)],
      ['forged victim-like key', json({}, `${this.#t.victimKey}x`)],
      ['victim key prefix', json({}, this.#t.victimKey.slice(0, -1))],
      ['key 600 chars', json({}, 'k'.repeat(600))],
      ['empty bearer', json({ authorization: 'Bearer ' }, undefined)],
      ['basic auth', json({ authorization: `Basic ${Buffer.from('a:b').toString('base64')}` }, undefined)],
      ['no scheme', json({ authorization: this.#t.attackerKey.replace('sk', 'xx') }, undefined)],
      // The first of two wins: a bad key first must not let the victim's second one through.
      [
        'two keys',
        json(
          { authorization: [`Bearer sk-${randomString(rng, 24)}`, `Bearer ${this.#t.victimKey}`] },
          undefined,
        ),
      ],
      ['latin-1 key', json({ authorization: 'Bearer sk-\u00e9\u00e8\u00ff' }, undefined)],
    ];
    const [label, headers] = pick(rng, variants);
    return this.#http(`auth: ${label}`, body, headers);
  }

  #malformedJson(): HttpCase {
    const rng = this.#rng;
    const valid = JSON.stringify(this.validChat());
    for (;;) {
      // A strict prefix of an object is never valid JSON; mutations then scramble it further.
      let s = valid.slice(0, rng.int(0, valid.length - 1));
      const mutations = rng.int(0, 4);
      for (let i = 0; i < mutations; i++) {
        const at = rng.int(0, s.length);
        const what = rng.int(0, 3);
        if (what === 0)
          s =
            s.slice(0, at) +
            pick(rng, ['{', '}', '[', ']', ',', ':', '"', '\\', 'NaN', '-', '0x1']) +
            s.slice(at);
        else if (what === 1) s = s.slice(0, at) + s.slice(at + 1);
        else if (what === 2) s = s.slice(0, at) + String.fromCharCode(rng.int(0, 127)) + s.slice(at);
        else s = `${s.slice(0, at)}${s.slice(at).replaceAll('"', "'")}`;
      }
      try {
        JSON.parse(s);
      } catch {
        return this.#http('malformed JSON', s, json({}, this.#t.attackerKey));
      }
    }
  }

  #wrongField(): HttpCase {
    const rng = this.#rng;
    const body = this.validChat();
    const chat: [string, Record<string, unknown> | null][] = [
      ['model number', { model: 42 }],
      ['model empty', { model: '' }],
      ['model null', { model: null }],
      ['model object', { model: { $gt: '' } }],
      ['messages string', { messages: 'hello' }],
      ['messages empty', { messages: [] }],
      ['messages null', { messages: null }],
      ['message role', { messages: [{ role: 'root', content: 'x' }] }],
      ['message content number', { messages: [{ role: 'user', content: 7 }] }],
      ['message not object', { messages: ['x'] }],
      ['messages 5000', { messages: Array.from({ length: 5000 }, () => ({ role: 'user', content: 'a' })) }],
      ['max_tokens negative', { max_tokens: -rng.int(1, 1000) }],
      ['max_tokens zero', { max_tokens: 0 }],
      ['max_tokens fraction', { max_tokens: 1.5 }],
      ['max_tokens huge', { max_tokens: 10 ** rng.int(7, 300) }],
      ['max_tokens string', { max_tokens: '100' }],
      ['max_tokens infinite', { max_tokens: 'INFINITY' }],
      ['max_completion_tokens negative', { max_completion_tokens: -5 }],
      ['temperature high', { temperature: 2 + rng.next() * 100 }],
      ['temperature negative', { temperature: -0.1 }],
      ['temperature string', { temperature: 'hot' }],
      ['top_p', { top_p: 1.5 }],
      ['n above the pool bound', { n: rng.int(9, 1000) }],
      ['n fraction', { n: 1.5 }],
      ['stop 20', { stop: Array.from({ length: 20 }, () => 'x') }],
      ['stop number', { stop: 5 }],
      ['stream string', { stream: 'yes' }],
      ['stream_options number', { stream: true, stream_options: 5 }],
      ['stream_options include_usage string', { stream: true, stream_options: { include_usage: 'yes' } }],
      ['priority fraction', { priority: 0.5 }],
      ['priority huge', { priority: 1e12 }],
      ['user long', { user: 'u'.repeat(300) }],
      ['unknown model', { model: `no-such-model-${rng.int(0, 1e6)}` }],
      // Fields outside the OpenAI/vLLM allow-list never reach the engine, whatever their size.
      ['unknown field', { [`x_${rng.int(0, 1e6)}`]: 'A'.repeat(rng.int(1, 2_000_000)) }],
      ['unknown field prototype-like', { constructor: { prototype: { admin: true } } }],
      ['tools not an array', { tools: 'all of them' }],
      [
        'too many image parts',
        {
          messages: [
            {
              role: 'user',
              content: Array.from({ length: 33 }, () => ({
                type: 'image_url',
                image_url: { url: 'data:,' },
              })),
            },
          ],
        },
      ],
      ['body array', null],
    ];
    const [label, over] = pick(rng, chat);
    if (rng.next() < 0.15) {
      const completions: [string, Record<string, unknown>][] = [
        ['prompt missing', {}],
        ['prompt two', { prompt: ['a', 'b'] }],
        ['prompt number', { prompt: 5 }],
        ['prompt empty list', { prompt: [] }],
      ];
      const [l, o] = pick(rng, completions);
      const { messages: _m, ...rest } = body;
      return this.#http(`completions: ${l}`, { ...rest, ...o }, json({}, this.#t.attackerKey), COMPLETIONS);
    }
    const payload =
      over === null
        ? [body]
        : label === 'max_tokens infinite'
          ? JSON.stringify({ ...body, max_tokens: 0 }).replace('"max_tokens":0', '"max_tokens":1e999')
          : { ...body, ...over };
    return this.#http(`field: ${label}`, payload, json({}, this.#t.attackerKey));
  }

  #invalidUtf8(): HttpCase {
    const rng = this.#rng;
    const bad = pick(rng, [
      Buffer.from([0xc3, 0x28]),
      Buffer.from([0xff]),
      Buffer.from([0xe2, 0x82]),
      Buffer.from([0xed, 0xa0, 0x80]),
      Buffer.from([0xf8, 0x88, 0x80, 0x80, 0x80]),
      Buffer.from([0xc0, 0xaf]),
    ]);
    const [head, tail] = JSON.stringify({
      ...this.validChat(),
      messages: [{ role: 'user', content: 'AB' }],
    }).split('AB');
    return this.#http(
      'invalid UTF-8',
      Buffer.concat([Buffer.from(head ?? ''), bad, Buffer.from(tail ?? '')]),
      json({}, this.#t.attackerKey),
    );
  }

  #deepNesting(): HttpCase {
    const rng = this.#rng;
    const depth = pick(rng, [200, 5000, 100_000]);
    const body = JSON.stringify({ ...this.validChat(), metadata: 'X' });
    const nested = `${'['.repeat(depth)}1${']'.repeat(depth)}`;
    const where = rng.next() < 0.5 ? 'unknown field' : 'content part';
    const s =
      where === 'unknown field'
        ? body.replace('"X"', nested)
        : body.replace(
            /"messages":\[.*?\]/,
            `"messages":[{"role":"user","content":[{"type":"text","text":"hi","x":${nested}}]}]`,
          );
    return this.#http(`deep nesting ${depth} in ${where}`, s, json({}, this.#t.attackerKey));
  }

  #huge(): HttpCase {
    const rng = this.#rng;
    const limit = this.#t.bodyLimitBytes;
    const v = rng.int(0, 3);
    if (v === 0)
      return this.#http(
        'body over the limit',
        { ...this.validChat(), messages: [{ role: 'user', content: 'a'.repeat(limit + 10) }] },
        json({}, this.#t.attackerKey),
      );
    if (v === 1)
      return this.#http(
        'model 1 MB',
        { ...this.validChat(), model: 'm'.repeat(1 << 20) },
        json({}, this.#t.attackerKey),
      );
    if (v === 2)
      // Fits the body limit, but no replica's context: refused before it is queued.
      return this.#http(
        'prompt larger than any context',
        { ...this.validChat(), messages: [{ role: 'user', content: 'word '.repeat(600_000) }] },
        json({}, this.#t.attackerKey),
      );
    return this.#http(
      'huge unknown field value',
      { ...this.validChat(), n: 3, extra: 'z'.repeat(1 << 20) },
      json({}, this.#t.attackerKey),
    );
  }

  #badHeader(): HttpCase {
    const rng = this.#rng;
    const body = this.validChat();
    const variants: [string, Record<string, string | string[]>][] = [
      ['unknown SLO class', { 'x-fairway-slo-class': `gold-${rng.int(0, 99)}` }],
      ['SLO class with spaces', { 'x-fairway-slo-class': 'inter active' }],
      ['app with quotes', { 'x-fairway-app': 'a"b' }],
      ['app with braces', { 'x-fairway-app': '{prefix}' }],
      ['user too long', { 'x-fairway-user': 'u'.repeat(200) }],
      ['user twice', { 'x-fairway-user': ['a', 'b'] }],
      ['interaction with spaces', { 'x-fairway-interaction': 'i 1' }],
      ['interaction with star', { 'x-fairway-interaction': '*' }],
      ['user with tab', { 'x-fairway-user': 'a\tb' }],
      ['app percent-encoded CRLF', { 'x-fairway-app': 'a%0d%0aAuthorization:%20Bearer' }],
    ];
    const [label, extra] = pick(rng, variants);
    if (rng.next() < 0.15)
      return this.#http(
        'app key claiming another app',
        body,
        json({ 'x-fairway-app': 'other-app' }, this.#t.attackerAppKey),
      );
    return this.#http(`header: ${label}`, body, { ...json({}, this.#t.attackerKey), ...extra });
  }

  #contentType(): HttpCase {
    const rng = this.#rng;
    const body = JSON.stringify(this.validChat());
    const [label, type, payload] = pick(rng, [
      ['text/plain', 'text/plain', body],
      ['form', 'application/x-www-form-urlencoded', 'model=x&messages=y'],
      [
        'multipart',
        'multipart/form-data; boundary=zz',
        `--zz\r\nContent-Disposition: form-data; name="a"\r\n\r\n${body}\r\n--zz--`,
      ],
      ['xml', 'application/xml', '<a/>'],
      ['json with form body', 'application/json', 'model=x&messages=y'],
      ['json empty body', 'application/json', ''],
      ['octet-stream', 'application/octet-stream', body],
      ['garbage type', '\u00ff/\u00fe', body],
    ] as const);
    return this.#http(`content-type: ${label}`, payload, {
      'content-type': type,
      authorization: `Bearer ${this.#t.attackerKey}`,
    });
  }

  #methodOrPath(): HttpCase {
    const rng = this.#rng;
    const auth = { authorization: `Bearer ${this.#t.attackerKey}` };
    const variants: [string, string, string][] = [
      ['GET chat', 'GET', CHAT],
      ['PUT chat', 'PUT', CHAT],
      ['DELETE chat', 'DELETE', CHAT],
      ['PATCH completions', 'PATCH', COMPLETIONS],
      ['POST models', 'POST', '/v1/models'],
      ['DELETE models', 'DELETE', '/v1/models'],
      ['POST metrics', 'POST', '/metrics'],
      ['unknown path', 'POST', `/v1/${randomString(rng, 8, 'abcdefgh')}`],
      ['trailing slash', 'POST', `${CHAT}/`],
      ['double slash', 'POST', `/v1//chat/completions`],
      ['dot segments', 'POST', '/v1/../v1/chat/completions/..'],
      ['encoded path', 'POST', '/v1/chat%2Fcompletions'],
      ['bad percent escape', 'GET', '/v1/%zz'],
      ['NUL escape', 'GET', '/v1/models%00'],
      ['long path', 'GET', `/v1/${'a'.repeat(8000)}`],
      ['admin probe', 'GET', '/admin/keys'],
      ['env probe', 'GET', '/.env'],
      ['OPTIONS', 'OPTIONS', CHAT],
    ];
    const [label, method, path] = pick(rng, variants);
    const withBody = method !== 'GET' && method !== 'OPTIONS';
    return {
      kind: 'http',
      label: `route: ${label}`,
      method,
      path,
      headers: withBody ? { ...auth, 'content-type': 'application/json' } : auth,
      ...(withBody ? { body: Buffer.from(JSON.stringify(this.validChat())) } : {}),
    };
  }

  #raw(): RawCase {
    const rng = this.#rng;
    const body = JSON.stringify(this.validChat());
    const len = Buffer.byteLength(body);
    const bad = `sk-${randomString(rng, 20, 'abcdef')}`;
    const victim = this.#t.victimKey;
    const head = (lines: string[]): string => `${lines.join('\r\n')}\r\n\r\n`;
    const variants: [string, string][] = [
      [
        'CRLF injection after a bad key (tries to add the victim key)',
        head([
          `POST ${CHAT} HTTP/1.1`,
          'Host: x',
          `Authorization: Bearer ${bad}`,
          `X-Fairway-User: u`,
          `Authorization: Bearer ${victim}`,
          'Content-Type: application/json',
          `Content-Length: ${len}`,
        ]) + body,
      ],
      [
        'bare LF in a header',
        `POST ${CHAT} HTTP/1.1\r\nHost: x\r\nX-Fairway-User: a\nAuthorization: Bearer ${victim}\r\nContent-Type: application/json\r\nContent-Length: ${len}\r\n\r\n${body}`,
      ],
      [
        'bare CR in a header',
        `POST ${CHAT} HTTP/1.1\r\nHost: x\r\nX-Fairway-User: a\rb\r\nContent-Type: application/json\r\nContent-Length: ${len}\r\n\r\n${body}`,
      ],
      [
        'NUL in a header',
        `POST ${CHAT} HTTP/1.1\r\nHost: x\r\nX-Fairway-App: a\u0000b\r\nContent-Length: ${len}\r\n\r\n${body}`,
      ],
      [
        'space before colon',
        `POST ${CHAT} HTTP/1.1\r\nHost: x\r\nAuthorization : Bearer ${victim}\r\nContent-Length: ${len}\r\n\r\n${body}`,
      ],
      [
        'obsolete line folding',
        `POST ${CHAT} HTTP/1.1\r\nHost: x\r\nX-Fairway-User: a\r\n Authorization: Bearer ${victim}\r\nContent-Length: ${len}\r\n\r\n${body}`,
      ],
      [
        'content-length and chunked (smuggling)',
        `POST ${CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${len}\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n`,
      ],
      [
        'two content-lengths',
        `POST ${CHAT} HTTP/1.1\r\nHost: x\r\nContent-Length: ${len}\r\nContent-Length: 3\r\n\r\n${body}`,
      ],
      [
        'bad chunk size',
        `POST ${CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n${body}\r\n0\r\n\r\n`,
      ],
      ['invalid method token', `G(T /v1/models HTTP/1.1\r\nHost: x\r\n\r\n`],
      ['unknown HTTP version', `GET /v1/models HTTP/9.9\r\nHost: x\r\n\r\n`],
      [
        'header larger than 16 KiB',
        `GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Pad: ${'p'.repeat(20_000)}\r\n\r\n`,
      ],
      ['no host header', `GET /v1/models HTTP/1.1\r\nAuthorization: Bearer ${bad}\r\n\r\n`],
      ['request line garbage', `${randomString(rng, 40, '\u0001\u0002abc \t')}\r\n\r\n`],
      [
        'absolute-form to another host',
        `POST http://evil.example${CHAT} HTTP/1.1\r\nHost: evil.example\r\nAuthorization: Bearer ${bad}\r\nContent-Type: application/json\r\nContent-Length: ${len}\r\n\r\n${body}`,
      ],
    ];
    const [label, text] = pick(rng, variants);
    return { kind: 'raw', label: `raw: ${label}`, bytes: Buffer.from(text, 'latin1') };
  }
}
