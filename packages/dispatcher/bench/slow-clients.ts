/**
 * Slow clients against one dispatcher: N connections each send request headers and part of a body,
 * then nothing. Prints how many the dispatcher still holds after the wait, and how many got a 408,
 * for the configured `server.requestTimeoutS`.
 *
 *   npx tsx packages/dispatcher/bench/slow-clients.ts [connections=1000] [requestTimeoutS=2] [waitS=5]
 */
import { connect, type Socket } from 'node:net';
import { parseConfig, silentLogger } from '@fairway/core';
import { serveSettings, startDispatcher } from '../src/index.ts';

const n = Number(process.argv[2] ?? 1000);
const timeoutS = Number(process.argv[3] ?? 2);
const waitS = Number(process.argv[4] ?? 5);

const config = parseConfig({
  tenants: [{ id: 'alpha', keys: [{ key: 'sk-slow-client-1' }] }],
  pools: [{ id: 'llama', model: 'llama-2-7b' }],
  server: { requestTimeoutS: timeoutS, headersTimeoutS: Math.min(timeoutS, 10) },
});
const d = await startDispatcher({
  settings: serveSettings({}, { port: 0, operatorPort: 0 }),
  config,
  logger: silentLogger,
});

let open = 0;
let got408 = 0;
const sockets: Socket[] = [];
const body = JSON.stringify({ model: 'llama-2-7b', messages: [{ role: 'user', content: 'hi' }] });
for (let i = 0; i < n; i++) {
  const s = connect(d.port, '127.0.0.1');
  sockets.push(s);
  s.on('connect', () => {
    open++;
    s.write(
      'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-slow-client-1\r\n' +
        `Content-Type: application/json\r\nContent-Length: ${body.length + 100}\r\n\r\n${body.slice(0, 10)}`,
    );
  });
  s.on('data', (chunk) => {
    if (String(chunk).startsWith('HTTP/1.1 408')) got408++;
  });
  s.on('close', () => open--);
  s.on('error', () => undefined);
}
await new Promise((r) => setTimeout(r, waitS * 1000));
console.log(
  `connections ${n}  requestTimeoutS ${timeoutS}  after ${waitS} s: held ${open}, answered 408 ${got408}`,
);
for (const s of sockets) s.destroy();
await d.close();
