import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BusError, NatsBus, type NatsSecurity, natsSecurityFromEnv } from '@fairway/bus';
import { startNatsServer, type TestServer } from '@fairway/testkit';
import {
  createAccount,
  createOperator,
  encodeAccount,
  encodeOperator,
  encodeUser,
  fmtCreds,
  createUser as jwtCreateUser,
} from '@nats-io/jwt';
import { createUser } from '@nats-io/nkeys';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

/**
 * Each credential mechanism fairway accepts, against a real nats-server that demands it: users
 * and NKeys over mutual TLS with a private CA, a token, and a `.creds` file in operator/JWT mode. A connection proves itself by a
 * message round trip, not by connecting alone.
 */
function openssl(dir: string, ...args: string[]): void {
  execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
}

/** A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by the CA. */
function makeCertificates(dir: string): void {
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  openssl(
    dir,
    'req',
    '-x509',
    ...ec,
    '-keyout',
    'ca.key',
    '-out',
    'ca.pem',
    '-days',
    '1',
    '-subj',
    '/CN=fairway test CA',
  );
  writeFileSync(join(dir, 'server.ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\n');
  writeFileSync(join(dir, 'client.ext'), 'extendedKeyUsage=clientAuth\n');
  for (const who of ['server', 'client']) {
    openssl(dir, 'req', ...ec, '-keyout', `${who}.key`, '-out', `${who}.csr`, '-subj', `/CN=fairway ${who}`);
    openssl(
      dir,
      'x509',
      '-req',
      '-in',
      `${who}.csr`,
      '-CA',
      'ca.pem',
      '-CAkey',
      'ca.key',
      '-CAcreateserial',
      '-out',
      `${who}.pem`,
      '-days',
      '1',
      '-extfile',
      `${who}.ext`,
    );
  }
}

/** Connects, sends a discover request to itself and closes: true if the message came back. */
async function roundTrip(servers: string, security?: NatsSecurity): Promise<boolean> {
  const bus = await NatsBus.connect({ servers, connectTimeoutMs: 3000, ...(security ? { security } : {}) });
  try {
    let got = false;
    bus.subscribe('discover', () => {
      got = true;
    });
    await bus.flush();
    bus.publish('discover', { requester: 'credentials-test' });
    await bus.flush();
    const deadline = Date.now() + 3000;
    while (!got && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    return got;
  } finally {
    await bus.close();
  }
}

async function refusal(servers: string, security?: NatsSecurity): Promise<string> {
  const err = await roundTrip(servers, security).then(
    () => new Error('connected'),
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(BusError);
  return (err as Error).message;
}

describe('NATS credentials over mutual TLS: user/password and NKey', () => {
  let server: TestServer;
  let dir: string;
  const password = 'tls-user-password-0001';
  const nkeyUser = createUser();
  const tls = () => ({
    caFile: join(dir, 'ca.pem'),
    certFile: join(dir, 'client.pem'),
    keyFile: join(dir, 'client.key'),
  });

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'fairway-nats-tls-'));
    makeCertificates(dir);
    writeFileSync(join(dir, 'seed.nk'), `${new TextDecoder().decode(nkeyUser.getSeed())}\n`, { mode: 0o600 });
    writeFileSync(join(dir, 'other-seed.nk'), new TextDecoder().decode(createUser().getSeed()));
    writeFileSync(
      join(dir, 'nats.conf'),
      `
tls {
  cert_file: "${join(dir, 'server.pem')}"
  key_file: "${join(dir, 'server.key')}"
  ca_file: "${join(dir, 'ca.pem')}"
  verify: true
}
authorization {
  users = [
    { user: tls-user, password: $TLS_USER_PASSWORD }
    { nkey: ${nkeyUser.getPublicKey()} }
  ]
}
`,
    );
    server = await startNatsServer({
      configPath: join(dir, 'nats.conf'),
      env: { TLS_USER_PASSWORD: password },
    });
  });
  afterAll(async () => {
    await server?.stop();
  });

  const url = () => `tls://127.0.0.1:${server.port}`;

  it('connects with a user and password, given as settings or from NATS_* variables', async () => {
    expect(await roundTrip(url(), { auth: { user: 'tls-user', password }, tls: tls() })).toBe(true);
    const fromEnv = natsSecurityFromEnv({
      NATS_USER: 'tls-user',
      NATS_PASSWORD: password,
      NATS_TLS_CA_FILE: tls().caFile,
      NATS_TLS_CERT_FILE: tls().certFile,
      NATS_TLS_KEY_FILE: tls().keyFile,
    });
    expect(await roundTrip(url(), fromEnv)).toBe(true);
  });

  it('connects with an NKey seed file, and refuses a seed the server does not know', async () => {
    expect(await roundTrip(url(), { auth: { nkeySeedFile: join(dir, 'seed.nk') }, tls: tls() })).toBe(true);
    expect(await refusal(url(), { auth: { nkeySeedFile: join(dir, 'other-seed.nk') }, tls: tls() })).toMatch(
      /Authorization Violation/i,
    );
  });

  it('refuses a client without its certificate or without the CA, and a wrong password, printing no secret', async () => {
    const noCert = await refusal(url(), {
      auth: { user: 'tls-user', password },
      tls: { caFile: tls().caFile },
    });
    expect(noCert).not.toContain(password);
    const noCa = await refusal(url(), {
      auth: { user: 'tls-user', password },
      tls: { certFile: tls().certFile, keyFile: tls().keyFile },
    });
    expect(noCa).toMatch(/certificate/i);
    const wrong = await refusal(`tls://tls-user:wrong-password-0002@127.0.0.1:${server.port}`, {
      tls: tls(),
    });
    expect(wrong).toMatch(/Authorization Violation/i);
    expect(wrong).not.toContain('wrong-password-0002');
  });

  it('names an unreadable seed file without reading anything from it', async () => {
    const message = await NatsBus.connect({
      servers: url(),
      security: { auth: { nkeySeedFile: join(dir, 'missing.nk') } },
    }).then(
      () => 'connected',
      (e: unknown) => (e as Error).message,
    );
    expect(message).toBe(`cannot read the NATS NKey seed file ${join(dir, 'missing.nk')}: ENOENT`);
    const notSeed = await NatsBus.connect({
      servers: url(),
      security: { auth: { nkeySeedFile: join(dir, 'ca.key') } },
    }).then(
      () => 'connected',
      (e: unknown) => (e as Error).message,
    );
    expect(notSeed).toMatch(/does not hold an NKey seed/);
    expect(notSeed).not.toContain('PRIVATE KEY');
  });
});

describe('NATS credentials: a token', () => {
  let server: TestServer;
  const token = 'fairway-test-token-0001';

  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fairway-nats-token-'));
    writeFileSync(join(dir, 'nats.conf'), 'authorization { token: $FAIRWAY_TEST_TOKEN }\n');
    server = await startNatsServer({
      configPath: join(dir, 'nats.conf'),
      env: { FAIRWAY_TEST_TOKEN: token },
    });
  });
  afterAll(async () => {
    await server?.stop();
  });

  it('connects with NATS_TOKEN or a token in the URL, and refuses a wrong one without printing it', async () => {
    const at = `nats://127.0.0.1:${server.port}`;
    expect(await roundTrip(at, natsSecurityFromEnv({ NATS_TOKEN: token }))).toBe(true);
    expect(await roundTrip(`nats://${token}@127.0.0.1:${server.port}`)).toBe(true);
    const wrong = await refusal(`nats://not-the-token-0003@127.0.0.1:${server.port}`);
    expect(wrong).toMatch(/Authorization Violation/i);
    expect(wrong).not.toContain('not-the-token-0003');
    expect(wrong).toContain('nats://***@127.0.0.1');
  });
});

describe('NATS credentials: a .creds file (operator/JWT mode)', () => {
  let server: TestServer;
  let dir: string;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'fairway-nats-creds-'));
    const operator = createOperator();
    const account = createAccount();
    const user = jwtCreateUser();
    const operatorJwt = await encodeOperator('fairway-test', operator);
    // Unlimited: the JWT library's defaults allow no connection at all.
    const unlimited = {
      conn: -1,
      subs: -1,
      data: -1,
      payload: -1,
      imports: -1,
      exports: -1,
      leaf: -1,
      wildcards: true,
    };
    const accountJwt = await encodeAccount('fleet', account, { limits: unlimited }, { signer: operator });
    const userJwt = await encodeUser('dispatcher', user, account);
    writeFileSync(join(dir, 'dispatcher.creds'), fmtCreds(userJwt, user), { mode: 0o600 });
    const stranger = jwtCreateUser();
    const otherAccount = createAccount();
    writeFileSync(
      join(dir, 'stranger.creds'),
      fmtCreds(await encodeUser('stranger', stranger, otherAccount), stranger),
    );
    writeFileSync(
      join(dir, 'nats.conf'),
      `operator: ${operatorJwt}\nresolver: MEMORY\nresolver_preload: {\n  ${account.getPublicKey()}: ${accountJwt}\n}\n`,
    );
    server = await startNatsServer({ configPath: join(dir, 'nats.conf') });
  });
  afterAll(async () => {
    await server?.stop();
  });

  it('connects with NATS_CREDS_FILE, and refuses a user of an account the server does not know', async () => {
    const at = `nats://127.0.0.1:${server.port}`;
    expect(await roundTrip(at, natsSecurityFromEnv({ NATS_CREDS_FILE: join(dir, 'dispatcher.creds') }))).toBe(
      true,
    );
    const stranger = await refusal(at, { auth: { credsFile: join(dir, 'stranger.creds') } });
    expect(stranger).toMatch(/Authorization Violation/i);
  });
});
