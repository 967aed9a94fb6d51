// Container health check without curl: exits 0 when GET <url> answers 2xx within the timeout.
// The URL is the first argument, else FAIRWAY_HEALTHCHECK_URL, else the dispatcher's /health on
// PORT (default 8080).
const url =
  process.argv[2] ??
  process.env.FAIRWAY_HEALTHCHECK_URL ??
  `http://127.0.0.1:${process.env.PORT ?? '8080'}/health`;

try {
  const response = await fetch(url, { signal: AbortSignal.timeout(2500) });
  process.exitCode = response.ok ? 0 : 1;
  if (!response.ok) process.stderr.write(`${url}: HTTP ${response.status}\n`);
} catch (err) {
  process.stderr.write(`${url}: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exitCode = 1;
}
