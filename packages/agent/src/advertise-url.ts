import type { NetworkInterfaceInfo } from 'node:os';
import { AgentError, AgentErrorCode } from './errors.ts';

/** Network interfaces by name, as `os.networkInterfaces()` returns them. */
export type NetworkInterfaces = Readonly<Record<string, readonly NetworkInterfaceInfo[] | undefined>>;

/** Where an advertised URL came from. */
export type AdvertiseUrlSource =
  /** `--advertise-url` / `FAIRWAY_ADVERTISE_URL`, as given. */
  | 'given'
  /** The engine's own URL, which other hosts can use as it is (or only this host: see `warning`). */
  | 'engine'
  /** The engine listens on a wildcard address: its port at this host's first non-internal IPv4 address. */
  | 'interface';

/** The URL an agent registers for its engine: the one dispatchers on other hosts connect to. */
export interface AdvertisedUrl {
  readonly url: string;
  readonly source: AdvertiseUrlSource;
  /** Set when only dispatchers on this host can reach `url` (a loopback address). */
  readonly warning?: string;
}

/** Inputs of {@link chooseAdvertiseUrl}. */
export interface AdvertiseUrlInput {
  /** The URL to advertise, when the operator gave one (`--advertise-url`, `FAIRWAY_ADVERTISE_URL`). */
  readonly advertiseUrl?: string | undefined;
  /** The URL the engine listens on, or the agent reaches it at (`--engine-url`). */
  readonly engineUrl: string;
  /** This host's interfaces (`os.networkInterfaces()`), for a wildcard listen address. */
  readonly interfaces: NetworkInterfaces;
  /** How the engine URL was given, to name it in messages. @default '--engine-url' */
  readonly engineUrlFlag?: string;
}

/** A URL's host without the brackets of an IPv6 literal. */
function bareHost(url: URL): string {
  return url.hostname.replace(/^\[(.*)\]$/, '$1');
}

/** Whether a host is a wildcard ("any address") that a listener binds to but no client can dial. */
export function isWildcardHost(host: string): boolean {
  const h = host.replace(/^\[(.*)\]$/, '$1').toLowerCase();
  return h === '0.0.0.0' || h === '::' || h === '0:0:0:0:0:0:0:0' || h === '::ffff:0.0.0.0';
}

/** Whether a host is a loopback address or name, reachable only from the host itself. */
export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[(.*)\]$/, '$1').toLowerCase();
  return (
    h === 'localhost' ||
    h.endsWith('.localhost') ||
    /^127\.\d+\.\d+\.\d+$/.test(h) ||
    h === '::1' ||
    h.startsWith('::ffff:127.')
  );
}

/** Parses an http(s) URL or throws the agent's advertise-URL error naming `what`. */
function httpUrl(value: string, what: string): URL {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new AgentError(AgentErrorCode.ADVERTISE_URL_INVALID, `${what}: "${value}" is not a URL`);
  }
  if ((url.protocol !== 'http:' && url.protocol !== 'https:') || url.hostname === '')
    throw new AgentError(AgentErrorCode.ADVERTISE_URL_INVALID, `${what}: "${value}" is not an http(s) URL`);
  return url;
}

/** `url` with its host replaced, without the trailing slash `URL.href` would add. */
function withHost(url: URL, host: string): string {
  const port = url.port === '' ? '' : `:${url.port}`;
  const path = url.pathname === '/' ? '' : url.pathname;
  return `${url.protocol}//${host}${port}${path}`;
}

/** This host's first non-internal IPv4 address, in `os.networkInterfaces()` order. */
function firstExternalIpv4(interfaces: NetworkInterfaces): string | undefined {
  for (const addresses of Object.values(interfaces))
    for (const a of addresses ?? []) if (a.family === 'IPv4' && !a.internal) return a.address;
  return undefined;
}

/**
 * Chooses the URL an agent registers for its engine. A wildcard address is never advertised:
 * 1. the given advertise URL, refused if it is not http(s) or names a wildcard host;
 * 2. else the engine URL when its host is routable — a loopback host is kept (single-host fleets
 *    work) with a `warning` that dispatchers on other hosts cannot reach it;
 * 3. else (the engine listens on a wildcard address) the engine's port at this host's first
 *    non-internal IPv4 address, refused with an error naming `--advertise-url` when there is none.
 * Throws an {@link AgentError} `ADVERTISE_URL_INVALID` with a message a user can act on.
 */
export function chooseAdvertiseUrl(input: AdvertiseUrlInput): AdvertisedUrl {
  if (input.advertiseUrl !== undefined) {
    const url = httpUrl(input.advertiseUrl, '--advertise-url');
    if (isWildcardHost(bareHost(url)))
      throw new AgentError(
        AgentErrorCode.ADVERTISE_URL_INVALID,
        `--advertise-url: ${url.hostname} is a wildcard address no other host can connect to; give this host's address or name`,
      );
    return { url: withHost(url, url.hostname), source: 'given' };
  }
  const flag = input.engineUrlFlag ?? '--engine-url';
  const engine = httpUrl(input.engineUrl, flag);
  const host = bareHost(engine);
  if (isLoopbackHost(host))
    return {
      url: withHost(engine, engine.hostname),
      source: 'engine',
      warning: `registering ${withHost(engine, engine.hostname)}, a loopback address: only dispatchers on this host can reach it (set --advertise-url to an address other hosts can use)`,
    };
  if (!isWildcardHost(host)) return { url: withHost(engine, engine.hostname), source: 'engine' };
  const ip = firstExternalIpv4(input.interfaces);
  if (ip === undefined)
    throw new AgentError(
      AgentErrorCode.ADVERTISE_URL_INVALID,
      `${flag}: ${engine.hostname} is a wildcard address no other host can connect to, and this host has no non-internal IPv4 address to advertise instead; set --advertise-url`,
    );
  return { url: withHost(engine, ip), source: 'interface' };
}
