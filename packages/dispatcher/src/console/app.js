// fairway's live console: Preact + htm (no build step) and uPlot, all served by the dispatcher from
// its installed packages. Every read and write goes through the admin HTTP API on this same
// origin with the admin token, which is kept in sessionStorage and sent as a Bearer header only.
// A link may carry the token once (`/console#token=…`, as `fairway up` prints it; `?token=` works
// too): it is moved to sessionStorage and taken out of the address before anything renders.
import htm from 'htm';
import { h, render } from 'preact';
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import uPlot from 'uplot';

const html = htm.bind(h);
const TOKEN_KEY = 'fairway.console.adminToken';
const POLL_MS = 2000;
/** Share-of-service history kept for the plot: 5 minutes of polls. */
const WINDOW_MS = 5 * 60 * 1000;
const COLORS = ['#2b6cb0', '#dd6b20', '#2f855a', '#b83280', '#6b46c1', '#c53030', '#319795', '#975a16'];

/** Calls the admin API with the token; throws an Error with the API's message on failure. */
async function api(token, method, path, body) {
  const res = await fetch(path, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  const json = text === '' ? {} : JSON.parse(text);
  if (!res.ok) {
    const err = new Error(json?.error?.message ?? `${method} ${path} answered ${res.status}`);
    err.status = res.status;
    throw err;
  }
  return json;
}

const pct = (x) => `${(x * 100).toFixed(1)}%`;
const time = (ms) => new Date(ms).toLocaleTimeString();

function Login({ onToken, error }) {
  const [value, setValue] = useState('');
  const submit = (e) => {
    e.preventDefault();
    if (value.trim() !== '') onToken(value.trim());
  };
  return html`<section class="login">
    <h2>fairway console</h2>
    <p class="muted">Enter the admin token (the dispatcher's <code>--admin-token-file</code>). It is kept for this tab only.</p>
    <form class="inline" onSubmit=${submit}>
      <input type="password" autocomplete="off" placeholder="admin token" data-testid="token-input"
        value=${value} onInput=${(e) => setValue(e.currentTarget.value)} />
      <button class="primary" type="submit" data-testid="token-submit">Open</button>
    </form>
    ${error && html`<p class="error" data-testid="login-error">${error}</p>`}
  </section>`;
}

/** Each tenant's share of the service delivered between consecutive polls, as a uPlot chart. */
function SharePlot({ history }) {
  const ref = useRef(null);
  const plot = useRef(null);
  const tenants = [...new Set(history.flatMap((p) => Object.keys(p.share)))].sort();
  const key = tenants.join(',');
  useEffect(() => {
    if (ref.current === null) return undefined;
    const opts = {
      width: Math.max(320, ref.current.clientWidth),
      height: 220,
      scales: { y: { range: [0, 1] } },
      axes: [{}, { values: (_u, ticks) => ticks.map((t) => `${Math.round(t * 100)}%`) }],
      series: [{}, ...tenants.map((t, i) => ({ label: t, stroke: COLORS[i % COLORS.length], width: 2 }))],
    };
    plot.current = new uPlot(opts, [[], ...tenants.map(() => [])], ref.current);
    return () => plot.current?.destroy();
  }, [key]);
  useEffect(() => {
    const xs = history.map((p) => p.at / 1000);
    plot.current?.setData([xs, ...tenants.map((t) => history.map((p) => p.share[t] ?? null))]);
  });
  return html`<div ref=${ref} data-testid="share-plot"></div>`;
}

function Tenants({ tenants, history }) {
  const totalWeight = tenants.reduce((a, t) => a + t.weight, 0) || 1;
  // Share over the plotted window: service delivered since the oldest reading.
  const first = history[0]?.service ?? {};
  const last = history[history.length - 1]?.service ?? {};
  const delivered = Object.fromEntries(tenants.map((t) => [t.id, (last[t.id] ?? 0) - (first[t.id] ?? 0)]));
  const total = Object.values(delivered).reduce((a, b) => a + b, 0);
  return html`<section>
    <h2>Tenants: share of service (last ${Math.round(WINDOW_MS / 60000)} min) against weight</h2>
    <${SharePlot} history=${history} />
    <table data-testid="tenants">
      <thead><tr><th>tenant</th><th>weight</th><th>weight share</th><th>served share</th><th>SLO class</th><th>limits</th></tr></thead>
      <tbody>
        ${tenants.map(
          (t) => html`<tr data-testid="tenant-row" data-tenant=${t.id}>
            <td>${t.id}</td><td>${t.weight}</td><td>${pct(t.weight / totalWeight)}</td>
            <td>${total > 0 ? pct(delivered[t.id] / total) : '–'}</td>
            <td>${t.sloClass ?? html`<span class="muted">default</span>`}</td>
            <td>${
              Object.entries(t.limits)
                .map(([k, v]) => `${k} ${v}`)
                .join(', ') || html`<span class="muted">none</span>`
            }</td>
          </tr>`,
        )}
      </tbody>
    </table>
  </section>`;
}

function Queues({ queues }) {
  return html`<section>
    <h2>Queues by band (this dispatcher)</h2>
    <table data-testid="queues">
      <thead><tr><th>pool</th><th>band</th><th>waiting</th></tr></thead>
      <tbody>${queues.map((q) => html`<tr><td>${q.pool}</td><td>${q.band}</td><td>${q.depth}</td></tr>`)}</tbody>
    </table>
  </section>`;
}

function Replicas({ replicas }) {
  return html`<section>
    <h2>Replicas</h2>
    <table data-testid="replicas">
      <thead><tr><th>replica</th><th>pool</th><th>state</th><th>KV cache</th><th>running</th><th>waiting</th><th>heartbeat</th></tr></thead>
      <tbody>
        ${replicas.map(
          (r) => html`<tr data-testid="replica-row" data-replica=${r.id}>
            <td>${r.id}</td><td>${r.pool}</td><td class=${`state-${r.state}`}>${r.state}</td>
            <td><span class="bar"><span style=${`width:${Math.round(r.kvUsage * 100)}%`}></span></span> ${pct(r.kvUsage)}</td>
            <td>${r.running}</td><td>${r.waiting}</td>
            <td>${r.heartbeatAgeMs === undefined ? '–' : `${Math.round(r.heartbeatAgeMs)} ms ago`}</td>
          </tr>`,
        )}
      </tbody>
    </table>
  </section>`;
}

function Events({ events }) {
  return html`<section>
    <h2>Recent throttles and evictions</h2>
    ${events.length === 0 && html`<p class="muted">None since this dispatcher started.</p>`}
    <table data-testid="events">
      <tbody>
        ${events.slice(0, 20).map(
          (e) => html`<tr>
            <td>${time(e.at)}</td>
            <td>${e.kind}</td>
            <td>${e.kind === 'throttle' ? `${e.tenant}: ${e.reason}` : `${e.requests} request(s) off ${e.replica}${e.reason ? ` (${e.reason})` : ''}`}</td>
          </tr>`,
        )}
      </tbody>
    </table>
  </section>`;
}

/** The admin actions: add or change a tenant, add a key (its secret shown once), revoke, limits. */
function Admin({ token, tenants, keys, refresh }) {
  const [message, setMessage] = useState(undefined);
  const [secret, setSecret] = useState(undefined);
  const run = async (what, call) => {
    try {
      await call();
      setMessage({ ok: true, text: `${what}: accepted (it applies on every dispatcher in a moment)` });
      setTimeout(refresh, 300);
    } catch (err) {
      setMessage({ ok: false, text: `${what}: ${err.message}` });
    }
  };
  const field = (form, name) => form.elements.namedItem(name)?.value.trim() ?? '';
  const num = (form, name) => (field(form, name) === '' ? undefined : Number(field(form, name)));
  const addTenant = (e) => {
    e.preventDefault();
    const f = e.currentTarget;
    const id = field(f, 'id');
    const body = {
      weight: num(f, 'weight') ?? 1,
      ...(field(f, 'sloClass') ? { sloClass: field(f, 'sloClass') } : {}),
    };
    void run(`tenant ${id}`, () => api(token, 'PUT', `/admin/v1/tenants/${encodeURIComponent(id)}`, body));
  };
  const addKey = (e) => {
    e.preventDefault();
    const f = e.currentTarget;
    const body = { tenant: field(f, 'tenant'), ...(field(f, 'app') ? { app: field(f, 'app') } : {}) };
    void run(`key for ${body.tenant}`, async () => {
      const created = await api(token, 'POST', '/admin/v1/keys', body);
      setSecret({ tenant: created.tenant, key: created.key });
    });
  };
  const setLimits = (e) => {
    e.preventDefault();
    const f = e.currentTarget;
    const id = field(f, 'tenant');
    const limits = Object.fromEntries(
      ['rpm', 'tpm', 'maxQueued'].map((k) => [k, num(f, k)]).filter(([, v]) => v !== undefined),
    );
    void run(`limits of ${id}`, () =>
      api(token, 'PUT', `/admin/v1/limits/tenant/${encodeURIComponent(id)}`, limits),
    );
  };
  const revoke = (k) => {
    if (
      !window.confirm(
        `Revoke this key of ${k.tenant}${k.app ? ` (app ${k.app})` : ''}? Clients using it get 401.`,
      )
    )
      return;
    void run(`revoke ${k.id.slice(0, 19)}…`, () => api(token, 'DELETE', `/admin/v1/keys/${k.id}`));
  };
  const tenantOptions = tenants.map((t) => html`<option value=${t.id}>${t.id}</option>`);
  return html`<section>
    <h2>Admin</h2>
    ${message && html`<p class=${message.ok ? 'ok' : 'error'} data-testid="admin-message">${message.text}</p>`}
    ${secret && html`<p data-testid="new-key">New key for ${secret.tenant} (shown once): <code class="secret">${secret.key}</code></p>`}
    <form class="inline" onSubmit=${addTenant} data-testid="tenant-form">
      <strong>Tenant</strong>
      <input name="id" placeholder="id" required pattern="[A-Za-z0-9._-]+" />
      <input name="weight" type="number" min="0.001" step="any" placeholder="weight" />
      <input name="sloClass" placeholder="SLO class (optional)" />
      <button type="submit">Add / update</button>
    </form>
    <form class="inline" onSubmit=${addKey} data-testid="key-form">
      <strong>Key</strong>
      <select name="tenant" required>${tenantOptions}</select>
      <input name="app" placeholder="app (optional)" />
      <button type="submit">Create key</button>
    </form>
    <form class="inline" onSubmit=${setLimits} data-testid="limits-form">
      <strong>Limits</strong>
      <select name="tenant" required>${tenantOptions}</select>
      <input name="rpm" type="number" min="0" placeholder="rpm" />
      <input name="tpm" type="number" min="0" placeholder="tpm" />
      <input name="maxQueued" type="number" min="0" placeholder="max queued" />
      <button type="submit">Set</button>
    </form>
    <table data-testid="keys">
      <thead><tr><th>key id</th><th>tenant</th><th>app</th><th>expires</th><th></th></tr></thead>
      <tbody>
        ${keys.map(
          (k) => html`<tr data-testid="key-row" data-key-id=${k.id} data-tenant=${k.tenant}>
            <td><code title=${k.id}>${k.id.slice(0, 19)}…</code></td><td>${k.tenant}</td><td>${k.app ?? ''}</td>
            <td>${k.expiresAt === undefined ? '' : new Date(k.expiresAt).toLocaleString()}</td>
            <td><button class="danger" data-testid="revoke" onClick=${() => revoke(k)}>Revoke</button></td>
          </tr>`,
        )}
      </tbody>
    </table>
  </section>`;
}

function Console({ token, signOut }) {
  const [overview, setOverview] = useState(undefined);
  const [keys, setKeys] = useState([]);
  const [history, setHistory] = useState([]);
  const [error, setError] = useState(undefined);
  const refresh = useCallback(async () => {
    try {
      const [o, k] = await Promise.all([
        api(token, 'GET', '/admin/v1/overview'),
        api(token, 'GET', '/admin/v1/keys'),
      ]);
      setOverview(o);
      setKeys(k.data);
      setError(undefined);
      setHistory((h) => {
        const service = Object.fromEntries(o.tenants.map((t) => [t.id, t.service]));
        const prev = h[h.length - 1];
        const share = {};
        if (prev !== undefined) {
          const deltas = o.tenants.map((t) => [t.id, Math.max(0, t.service - (prev.service[t.id] ?? 0))]);
          const total = deltas.reduce((a, [, d]) => a + d, 0);
          for (const [id, d] of deltas) share[id] = total > 0 ? d / total : null;
        }
        return [...h.filter((p) => p.at >= o.at - WINDOW_MS), { at: o.at, service, share }];
      });
    } catch (err) {
      if (err.status === 401 || err.status === 403) signOut(err.message);
      else setError(err.message);
    }
  }, [token]);
  useEffect(() => {
    void refresh();
    const t = setInterval(refresh, POLL_MS);
    return () => clearInterval(t);
  }, [refresh]);
  return html`<div>
    <header>
      <h1>fairway console</h1>
      <span class="muted" data-testid="dispatcher">${overview ? `dispatcher ${overview.dispatcher}, ${time(overview.at)}` : 'connecting…'}</span>
      ${error && html`<span class="error">${error}</span>`}
      <button onClick=${() => signOut(undefined)}>Sign out</button>
    </header>
    ${
      overview &&
      html`<main>
      <${Tenants} tenants=${overview.tenants} history=${history} />
      <${Replicas} replicas=${overview.replicas} />
      <${Queues} queues=${overview.queues} />
      <${Events} events=${overview.events} />
      <${Admin} token=${token} tenants=${overview.tenants} keys=${keys} refresh=${refresh} />
    </main>`
    }
  </div>`;
}

/**
 * Takes a token given in the page's address into sessionStorage and rewrites the address without
 * it, so it stays out of the history, bookmarks and anything copied from the address bar.
 */
function adoptTokenFromAddress() {
  const fromHash = new URLSearchParams(location.hash.slice(1)).get('token');
  const query = new URLSearchParams(location.search);
  const token = fromHash ?? query.get('token');
  if (token === null) return;
  query.delete('token');
  const search = query.toString();
  history.replaceState(null, '', `${location.pathname}${search === '' ? '' : `?${search}`}`);
  if (token.trim() !== '') sessionStorage.setItem(TOKEN_KEY, token.trim());
}

function App() {
  const [token, setToken] = useState(() => sessionStorage.getItem(TOKEN_KEY) ?? undefined);
  const [error, setError] = useState(undefined);
  const signIn = (t) => {
    sessionStorage.setItem(TOKEN_KEY, t);
    setError(undefined);
    setToken(t);
  };
  const signOut = (why) => {
    sessionStorage.removeItem(TOKEN_KEY);
    setError(why);
    setToken(undefined);
  };
  return token === undefined
    ? html`<${Login} onToken=${signIn} error=${error} />`
    : html`<${Console} token=${token} signOut=${signOut} />`;
}

adoptTokenFromAddress();
const root = document.getElementById('app');
// The loading note goes: render() would keep it beside the app.
root.textContent = '';
render(html`<${App} />`, root);
