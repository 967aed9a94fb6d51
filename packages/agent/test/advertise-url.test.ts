import type { NetworkInterfaceInfo } from 'node:os';
import { MemoryBus } from '@fairway/bus';
import { systemClock } from '@fairway/core';
import { VllmClient } from '@fairway/engine';
import { afterEach, describe, expect, it } from 'vitest';
import {
  AgentErrorCode,
  chooseAdvertiseUrl,
  isLoopbackHost,
  isWildcardHost,
  type NetworkInterfaces,
  NodeAgent,
} from '../src/index.ts';

function nic(address: string, family: 'IPv4' | 'IPv6', internal = false): NetworkInterfaceInfo {
  const base = { address, mac: '02:00:00:00:00:01', internal, cidr: null, netmask: '' };
  return family === 'IPv4' ? { ...base, family } : { ...base, family, scopeid: 0 };
}

/** A host with loopback, a NIC with only IPv6 first, then two IPv4 NICs. */
const HOST: NetworkInterfaces = {
  lo: [nic('127.0.0.1', 'IPv4', true), nic('::1', 'IPv6', true)],
  wg0: [nic('fd00::7', 'IPv6')],
  eth0: [nic('fe80::1', 'IPv6'), nic('10.213.7.11', 'IPv4')],
  eth1: [nic('192.168.1.5', 'IPv4')],
};
const LOOPBACK_ONLY: NetworkInterfaces = { lo: [nic('127.0.0.1', 'IPv4', true)] };

function refusal(fn: () => unknown): { code: string; message: string } {
  try {
    fn();
  } catch (err) {
    return err as { code: string; message: string };
  }
  throw new Error('expected an error');
}

describe('chooseAdvertiseUrl', () => {
  it('advertises the URL the operator gave, whatever the engine listens on', () => {
    expect(
      chooseAdvertiseUrl({
        advertiseUrl: 'http://gpu-node-3.internal:8000/',
        engineUrl: 'http://0.0.0.0:8000',
        interfaces: HOST,
      }),
    ).toEqual({ url: 'http://gpu-node-3.internal:8000', source: 'given' });
  });

  it('refuses a given URL that is malformed, not http(s) or a wildcard address', () => {
    for (const advertiseUrl of [
      'gpu-node-3:8000',
      'ftp://gpu-node-3',
      'http://0.0.0.0:8000',
      'http://[::]:8000',
    ]) {
      const err = refusal(() =>
        chooseAdvertiseUrl({ advertiseUrl, engineUrl: 'http://10.0.0.1:8000', interfaces: HOST }),
      );
      expect(err.code, advertiseUrl).toBe(AgentErrorCode.ADVERTISE_URL_INVALID);
      expect(err.message, advertiseUrl).toMatch(/^--advertise-url: /);
    }
  });

  it("advertises the engine's own URL when other hosts can use it", () => {
    for (const engineUrl of ['http://10.213.7.11:8000', 'https://vllm-0.vllm.svc.cluster.local:8443/'])
      expect(chooseAdvertiseUrl({ engineUrl, interfaces: HOST })).toEqual({
        url: engineUrl.replace(/\/$/, ''),
        source: 'engine',
      });
  });

  it('replaces a wildcard listen address by the first non-internal IPv4 address, keeping scheme and port', () => {
    expect(chooseAdvertiseUrl({ engineUrl: 'http://0.0.0.0:8000', interfaces: HOST })).toEqual({
      url: 'http://10.213.7.11:8000',
      source: 'interface',
    });
    expect(chooseAdvertiseUrl({ engineUrl: 'https://[::]:9443', interfaces: HOST }).url).toBe(
      'https://10.213.7.11:9443',
    );
  });

  it('refuses a wildcard listen address on a host without an external IPv4 address, naming the flags', () => {
    const err = refusal(() =>
      chooseAdvertiseUrl({
        engineUrl: 'http://0.0.0.0:8000',
        engineUrlFlag: '--host',
        interfaces: LOOPBACK_ONLY,
      }),
    );
    expect(err.code).toBe(AgentErrorCode.ADVERTISE_URL_INVALID);
    expect(err.message).toMatch(/^--host: 0\.0\.0\.0 is a wildcard address .* set --advertise-url$/);
  });

  it('keeps a loopback engine URL (one-host fleets) but warns that other hosts cannot reach it', () => {
    for (const engineUrl of ['http://127.0.0.1:8000', 'http://localhost:8000', 'http://[::1]:8000']) {
      const chosen = chooseAdvertiseUrl({ engineUrl, interfaces: HOST });
      expect(chosen.url).toBe(engineUrl);
      expect(chosen.warning).toMatch(/only dispatchers on this host can reach it \(set --advertise-url/);
    }
  });
});

describe('isWildcardHost and isLoopbackHost', () => {
  it('tell the any-address, loopback and routable hosts apart', () => {
    expect(['0.0.0.0', '::', '[::]', '0:0:0:0:0:0:0:0'].every(isWildcardHost)).toBe(true);
    expect(
      ['127.0.0.1', '127.8.0.1', 'localhost', 'LOCALHOST', '[::1]', '::ffff:127.0.0.1'].every(isLoopbackHost),
    ).toBe(true);
    for (const routable of ['10.213.7.11', 'gpu-node-3', '::2', 'localhost.example.com']) {
      expect(isWildcardHost(routable), routable).toBe(false);
      expect(isLoopbackHost(routable), routable).toBe(false);
    }
  });
});

describe('NodeAgent', () => {
  const closers: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of closers.splice(0)) await c();
  });

  function agentFor(engineUrl: string, url?: string): NodeAgent {
    const engine = new VllmClient({ url: engineUrl });
    closers.push(() => engine.close());
    return new NodeAgent({
      bus: new MemoryBus(),
      engine,
      clock: systemClock,
      replicaId: 'r1',
      pool: 'llama',
      model: 'llama-2-7b',
      ...(url === undefined ? {} : { url }),
    });
  }

  it('never registers a wildcard address, given or taken from the engine client', () => {
    expect(refusal(() => agentFor('http://127.0.0.1:8000', 'http://0.0.0.0:8000')).code).toBe(
      AgentErrorCode.ADVERTISE_URL_INVALID,
    );
    expect(refusal(() => agentFor('http://0.0.0.0:8000')).message).toMatch(/wildcard address/);
    expect(agentFor('http://0.0.0.0:8000', 'http://10.213.7.11:8000').replicaId).toBe('r1');
  });
});
