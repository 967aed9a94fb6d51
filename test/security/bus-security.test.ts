import { randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { BusError, NatsBus, type NatsSecurity, Subjects } from '@fairway/bus';
import { hashApiKey } from '@fairway/dispatcher';
import { freePort, natsPassword, startNatsServer, startRedisServer, type TestServer } from '@fairway/testkit';
import { jetstream } from '@nats-io/jetstream';
import { connect, type NatsConnection, PermissionViolationError } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FairwayProcess, startFairway } from '../e2e/support/processes.ts';

/**
 * The bus as an attacker meets it: a real nats-server started with the shipped
 * `infra/nats/nats-server.conf` (passwords from the environment, port by flag), a `fairway serve`
 * dispatcher and a `fairway engine-sim` with its agent as separate processes, each with its own
 * NATS user, and the operator's key made by `fairway admin keygen`.
 */
const SHIPPED_CONFIG = resolve(import.meta.dirname, '..', '..', 'infra', 'nats', 'nats-server.conf');
const MODEL = 'llama-2-7b';
const ALPHA_KEY = 'sk-security-alpha-0001';
const PASSWORDS = {
  FAIRWAY_DISPATCHER_NATS_PASSWORD: natsPassword(),
  FAIRWAY_ADMIN_NATS_PASSWORD: natsPassword(),
  FAIRWAY_AGENT_ENGINE_A_NATS_PASSWORD: natsPassword(),
  FAIRWAY_AGENT_ENGINE_B_NATS_PASSWORD: natsPassword(),
};
const DISPATCHER = { user: 'dispatcher', password: PASSWORDS.FAIRWAY_DISPATCHER_NATS_PASSWORD };
const ADMIN = { user: 'admin', password: PASSWORDS.FAIRWAY_ADMIN_NATS_PASSWORD };
const AGENT_A = { user: 'agent-engine-a', password: PASSWORDS.FAIRWAY_AGENT_ENGINE_A_NATS_PASSWORD };
const AGENT_B = { user: 'agent-engine-b', password: PASSWORDS.FAIRWAY_AGENT_ENGINE_B_NATS_PASSWORD };

const CONFIG = `
tenants:
  - { id: alpha, keys: [{ key: ${ALPHA_KEY} }] }
pools:
  - { id: llama, model: ${MODEL} }
policy: { ordering: vtc, placement: least-kv }
bus:
  # engine-b's agent user exists in the shipped NATS config, but this fleet runs engine-a only.
  allowedReplicas: [engine-a]
`;

/** An HTTP server posing as an engine: it counts what it is sent and answers like vLLM would. */
async function decoyEngine(): Promise<{ url: string; hits: () => number; close: () => Promise<void> }> {
  let hits = 0;
  const server: Server = createServer((req, res) => {
    if (req.url?.startsWith('/v1/')) hits++;
    res.setHeader('content-type', 'application/json');
    res.end(
      JSON.stringify({
        id: 'x',
        object: 'chat.completion',
        choices: [
          { index: 0, message: { role: 'assistant', content: 'attacker text' }, finish_reason: 'stop' },
        ],
        usage: { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 },
      }),
    );
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : 0;
  return {
    url: `http://127.0.0.1:${port}`,
    hits: () => hits,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

function registration(replicaId: string, url: string) {
  return {
    replicaId,
    epoch: `forged-${randomBytes(4).toString('hex')}`,
    url,
    pool: 'llama',
    model: MODEL,
    tp: 1,
    kvCapacityTokens: 10_000_000,
    blockSize: 16,
    maxNumSeqs: 1024,
    adapters: [],
    at: Date.now(),
  };
}

function heartbeat(replicaId: string, epoch: string, seq: number) {
  return {
    replicaId,
    epoch,
    seq,
    ts: Date.now(),
    state: 'ready',
    running: 0,
    waiting: 0,
    kvUsage: 0,
    kvUsedTokens: 0,
    promptTokensTotal: 0,
    generationTokensTotal: 0,
    preemptionsTotal: 0,
    adapters: [],
  };
}

/** Publishes raw JSON on `subject` as `nc` and waits for the server to have seen it. */
async function publishRaw(nc: NatsConnection, subject: string, value: unknown): Promise<void> {
  nc.publish(subject, JSON.stringify(value));
  await nc.flush();
}

/** Server errors a connection receives (permission violations arrive this way, asynchronously). */
function serverErrors(nc: NatsConnection): Error[] {
  const errors: Error[] = [];
  void (async () => {
    for await (const s of nc.status()) if (s.type === 'error') errors.push(s.error);
  })();
  return errors;
}

async function waitFor(check: () => boolean | Promise<boolean>, timeoutMs = 10_000, what = 'condition') {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('the bus with the shipped NATS auth config', () => {
  let nats: TestServer;
  let redis: TestServer;
  let dir: string;
  let dispatcher: FairwayProcess;
  let engine: FairwayProcess;
  const conns: NatsConnection[] = [];
  const natsAt = (): string => `nats://127.0.0.1:${nats.port}`;
  const as = async (who: { user: string; password: string }): Promise<NatsConnection> => {
    const nc = await connect({ servers: natsAt(), user: who.user, pass: who.password });
    conns.push(nc);
    return nc;
  };
  const chat = async (key: string): Promise<{ status: number; content: string }> => {
    const res = await fetch(`${dispatcher.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hello' }], max_tokens: 8 }),
    });
    const body = (await res.json()) as { choices?: { message?: { content?: string } }[] };
    return { status: res.status, content: body.choices?.[0]?.message?.content ?? '' };
  };
  const admin = async (...args: string[]): Promise<FairwayProcess | Error> =>
    startFairway(
      ['admin', ...args, '--nats-url', natsAt(), '--operator-key', join(dir, 'operator.key')],
      /^published .* as admin event (\d+)/,
      { NATS_USER: ADMIN.user, NATS_PASSWORD: ADMIN.password },
    ).catch((err: unknown) => (err instanceof Error ? err : new Error(String(err))));
  const dispatcherLog = (): string => dispatcher.output.join('\n');

  beforeAll(async () => {
    nats = await startNatsServer({ configPath: SHIPPED_CONFIG, env: PASSWORDS });
    redis = await startRedisServer();
    dir = mkdtempSync(join(tmpdir(), 'fairway-security-'));
    writeFileSync(join(dir, 'fairway.yaml'), CONFIG);
    const keygen = await startFairway(
      ['admin', 'keygen', '--out-dir', dir, '--name', 'operator'],
      /^operator key (ed25519:\S+)/,
    );
    await keygen.stop();
    dispatcher = await startFairway(
      ['serve', '-c', join(dir, 'fairway.yaml'), '--port', '0', '--operator-port', '0'],
      /listening on (http:\S+)/,
      {
        NATS_URL: natsAt(),
        NATS_USER: DISPATCHER.user,
        NATS_PASSWORD: DISPATCHER.password,
        REDIS_URL: redis.url,
        FAIRWAY_OPERATOR_PUBLIC_KEY_FILE: join(dir, 'operator.pub'),
        FAIRWAY_LOG_LEVEL: 'info',
      },
    );
    // The agent's password comes in the URL here, the dispatcher's from NATS_USER/NATS_PASSWORD.
    engine = await startFairway(
      [
        'engine-sim',
        '--port',
        '0',
        '--speed',
        '20',
        '--replica-id',
        'engine-a',
        '--nats-url',
        `nats://${AGENT_A.user}:${AGENT_A.password}@127.0.0.1:${nats.port}`,
      ],
      /listening on (http:\S+)/,
    );
    await waitFor(async () => (await chat(ALPHA_KEY)).status === 200, 15_000, 'engine-a to serve');
  }, 120_000);

  afterAll(async () => {
    for (const nc of conns) await nc.close().catch(() => undefined);
    await engine?.stop();
    await dispatcher?.stop();
    await redis?.stop();
    await nats?.stop();
  });

  it('serves a chat completion end to end with each process on its own NATS user', async () => {
    const res = await chat(ALPHA_KEY);
    expect(res.status).toBe(200);
    expect(res.content.length).toBeGreaterThan(0);
    expect(res.content).not.toContain('attacker');
  });

  it('refuses a client without credentials or with a wrong password, never printing the password', async () => {
    await expect(connect({ servers: natsAt() })).rejects.toThrow(/Authorization Violation/i);
    const wrong = `nats://dispatcher:${'not-the-password'}@127.0.0.1:${nats.port}`;
    const err = await NatsBus.connect({ servers: wrong, connectTimeoutMs: 2000 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BusError);
    expect((err as Error).message).toMatch(/Authorization Violation/i);
    expect((err as Error).message).not.toContain('not-the-password');
    expect((err as Error).message).toContain('nats://dispatcher:***@127.0.0.1');
    // The same user with the right password connects, in the URL or as settings.
    const right = `nats://dispatcher:${encodeURIComponent(DISPATCHER.password)}@127.0.0.1:${nats.port}`;
    const viaUrl = await NatsBus.connect({ servers: right });
    await viaUrl.close();
    const security: NatsSecurity = { auth: DISPATCHER };
    const viaSettings = await NatsBus.connect({ servers: natsAt(), security });
    await viaSettings.close();
  });

  it('lets a dispatcher publish only its own subjects and signed admin events: its unsigned key-add is refused, no registrations or stream deletion', async () => {
    const nc = await as(DISPATCHER);
    const errors = serverErrors(nc);
    // The dispatcher user may publish into the admin stream (for its admin API), but what it
    // publishes unsigned applies nowhere: here, revoking a tenant's key.
    await jetstream(nc).publish(
      'fairway.admin.keyRevoke',
      JSON.stringify({ type: 'keyRevoke', at: Date.now(), keyHash: hashApiKey(ALPHA_KEY) }),
    );
    await publishRaw(nc, 'fairway.replica.engine-a.register', registration('engine-a', 'http://127.0.0.1:9'));
    await expect(
      jetstream(nc)
        .jetstreamManager()
        .then((jsm) => jsm.streams.delete('fairway_admin')),
    ).rejects.toThrow();
    await waitFor(() => errors.length >= 2, 5000, 'permission violations');
    const denied = errors
      .filter((e) => e instanceof PermissionViolationError)
      .map((e) => (e as PermissionViolationError).subject);
    expect(denied).toEqual(expect.arrayContaining(['fairway.replica.engine-a.register']));
    await waitFor(() => dispatcherLog().includes('"type":"keyRevoke"'), 10_000, 'the refusal');
    expect(dispatcherLog()).toMatch(/"type":"keyRevoke".*"reason":"unsigned"/);
    expect((await chat(ALPHA_KEY)).status).toBe(200);
  });

  it("serves admin API writes on a dispatcher that holds the operator key, as the shipped config's dispatcher user", async () => {
    const token = 'fw-admin-token-for-the-security-suite';
    writeFileSync(join(dir, 'admin.token'), token);
    const writer = await startFairway(
      ['serve', '-c', join(dir, 'fairway.yaml'), '--port', '0', '--operator-port', String(await freePort())],
      /metrics on (http:\S+)\/metrics/,
      {
        NATS_URL: natsAt(),
        NATS_USER: DISPATCHER.user,
        NATS_PASSWORD: DISPATCHER.password,
        REDIS_URL: redis.url,
        FAIRWAY_OPERATOR_PUBLIC_KEY_FILE: join(dir, 'operator.pub'),
        FAIRWAY_OPERATOR_KEY_FILE: join(dir, 'operator.key'),
        FAIRWAY_ADMIN_TOKEN_FILE: join(dir, 'admin.token'),
      },
    );
    try {
      const res = await fetch(`${writer.url}/admin/v1/keys`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ tenant: 'alpha' }),
      });
      const body = (await res.json()) as { key?: string };
      expect(res.status, JSON.stringify(body)).toBe(201);
      // Applied by every dispatcher, the other one included.
      await waitFor(async () => (await chat(body.key ?? '')).status === 200, 10_000, 'the new key to work');
    } finally {
      await writer.stop();
    }
  });

  it('applies nothing an admin bus user publishes without the operator key: the key stays 401, the limit unchanged', async () => {
    const bus = await NatsBus.connect({ servers: natsAt(), security: { auth: ADMIN } });
    const minted = 'sk-minted-without-operator-key';
    const seqs = [
      await bus.publishAdminEvent({
        type: 'keyAdd',
        at: Date.now(),
        tenantId: 'alpha',
        keyHash: hashApiKey(minted),
      }),
      await bus.publishAdminEvent({
        type: 'limitsSet',
        at: Date.now(),
        scope: 'tenant',
        id: 'alpha',
        limits: { rpm: 0 },
      }),
      // A signature that does not verify, claiming the operator's key id.
      await bus.publishAdminEvent({
        payload: JSON.stringify({
          type: 'keyAdd',
          at: Date.now(),
          tenantId: 'alpha',
          keyHash: hashApiKey(minted),
          nonce: randomBytes(16).toString('hex'),
        }),
        keyId: 'ed25519:0000000000000000',
        sig: randomBytes(64).toString('base64'),
      }),
    ];
    await bus.close();
    // Every dispatcher logs each refusal with its reason and subject.
    await waitFor(
      () => seqs.every((s) => dispatcherLog().includes(`"seq":${s},`)),
      10_000,
      'the refusals to be logged',
    );
    expect((await chat(minted)).status).toBe(401);
    expect((await chat(ALPHA_KEY)).status).toBe(200);
    const refused = dispatcher.output.filter((l) => l.includes('admin: event refused'));
    expect(refused.join('\n')).toMatch(/"reason":"unsigned"/);
    expect(refused.join('\n')).toMatch(/"subject":"fairway.admin.limitsSet"/);
    expect(refused.join('\n')).toMatch(/signed by unknown key ed25519:0000000000000000/);
  });

  it('applies what the operator signs, and a re-published copy of an old key-add cannot bring back a revoked key', async () => {
    const key = 'sk-security-carol-0001';
    const added = await admin('key-add', 'alpha', '--key', key);
    expect(added).not.toBeInstanceOf(Error);
    await waitFor(async () => (await chat(key)).status === 200, 10_000, 'the signed key to apply');
    const revoked = await admin('key-revoke', '--key', key);
    expect(revoked).not.toBeInstanceOf(Error);
    await waitFor(async () => (await chat(key)).status === 401, 10_000, 'the revocation to apply');

    // The attacker holds admin bus credentials and copies the old signed key-add, byte for byte.
    const nc = await as(ADMIN);
    const js = jetstream(nc);
    const jsm = await js.jetstreamManager();
    const info = await jsm.streams.info('fairway_admin');
    const reader = await NatsBus.connect({ servers: natsAt(), security: { auth: ADMIN } });
    const history = await reader.replayAdminEvents();
    await reader.close();
    const oldAdd = history.find((r) => r.event.type === 'keyAdd' && r.event.keyHash === hashApiKey(key));
    expect(oldAdd?.signed).toBeDefined();
    const ack = await js.publish('fairway.admin.keyAdd', JSON.stringify(oldAdd?.signed));
    expect(ack.seq).toBeGreaterThan(info.state.last_seq);
    await waitFor(() => dispatcherLog().includes(`"seq":${ack.seq},`), 10_000, 'the replay to be refused');
    expect(dispatcherLog()).toMatch(/replayed: an event with this nonce was already applied/);
    expect((await chat(key)).status).toBe(401);
  });

  it('refuses forged replicas: another node user cannot publish for engine-a, nor name it in a payload, nor join unlisted', async () => {
    const decoy = await decoyEngine();
    try {
      const agentB = await as(AGENT_B);
      const errors = serverErrors(agentB);
      // 1. Agent B's user may not publish under engine-a's or a new replica's subjects at all.
      const onA = registration('engine-a', decoy.url);
      await publishRaw(agentB, 'fairway.replica.engine-a.register', onA);
      await publishRaw(agentB, 'fairway.replica.evil.register', registration('evil', decoy.url));
      await waitFor(() => errors.length >= 2, 5000, 'permission violations');
      // 2. On its own subject, a payload naming engine-a is refused by the dispatcher.
      const hijack = registration('engine-a', decoy.url);
      await publishRaw(agentB, 'fairway.replica.engine-b.register', hijack);
      // 3. engine-b itself is not in this fleet's allowed list.
      const own = registration('engine-b', decoy.url);
      await publishRaw(agentB, 'fairway.replica.engine-b.register', own);
      // Registrations and heartbeats keep both forged replicas fresh and empty (the most attractive)
      // while clients call, as a real agent's would.
      let seq = 0;
      const beat = setInterval(() => {
        seq++;
        agentB.publish('fairway.replica.engine-b.register', JSON.stringify(hijack));
        agentB.publish('fairway.replica.engine-b.register', JSON.stringify(own));
        agentB.publish(
          'fairway.replica.engine-b.heartbeat',
          JSON.stringify(heartbeat('engine-a', hijack.epoch, seq)),
        );
        agentB.publish(
          'fairway.replica.engine-b.heartbeat',
          JSON.stringify(heartbeat('engine-b', own.epoch, seq)),
        );
      }, 50);
      try {
        await new Promise((r) => setTimeout(r, 300));
        for (let i = 0; i < 10; i++) {
          const res = await chat(ALPHA_KEY);
          expect(res.content).not.toContain('attacker');
          expect(res.status).toBe(200);
        }
      } finally {
        clearInterval(beat);
      }
      expect(decoy.hits()).toBe(0);
      await waitFor(
        () => dispatcherLog().includes('refused a replica that is not in the allowed list'),
        5000,
        'the allow-list refusal',
      );
      expect(dispatcherLog()).toContain('refused a message naming another route than its subject');
      expect(new Subjects('fairway').of('registration', 'engine-a')).toBe(
        'fairway.replica.engine-a.register',
      );
    } finally {
      await decoy.close();
    }
  });

  it('never writes a NATS password into any process output', () => {
    const all = [...dispatcher.output, ...engine.output].join('\n');
    for (const secret of Object.values(PASSWORDS)) expect(all).not.toContain(secret);
  });
});
