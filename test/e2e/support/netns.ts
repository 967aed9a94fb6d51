import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';

/** Runs `ip <args>`; throws with ip's message on failure. */
function ip(...args: string[]): void {
  execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });
}

/**
 * Whether this process may create Linux network namespaces: it must be root and `ip netns add`
 * must work (a container without CAP_SYS_ADMIN, or a host without iproute2, cannot).
 */
export function netnsSupport(): { readonly ok: true } | { readonly ok: false; readonly reason: string } {
  if (process.platform !== 'linux')
    return { ok: false, reason: `network namespaces need Linux, not ${process.platform}` };
  if (process.getuid?.() !== 0) return { ok: false, reason: 'network namespaces need root (run as uid 0)' };
  const probe = `fwprobe-${randomBytes(4).toString('hex')}`;
  try {
    ip('netns', 'add', probe);
  } catch (err) {
    return {
      ok: false,
      reason: `\`ip netns add\` failed: ${String((err as { stderr?: unknown }).stderr ?? err).trim()}`,
    };
  }
  try {
    ip('netns', 'del', probe);
  } catch {
    // Gone already or never mounted: nothing to clean.
  }
  return { ok: true };
}

/**
 * A private test network on this machine: one network namespace per "host", each with its own
 * address on `<subnet>.0/24`, joined by a bridge that lives in a namespace of its own, so nothing
 * is added to the machine's own network. Every name carries a random tag, so runs never collide.
 */
export class NetnsLab {
  readonly tag = randomBytes(3).toString('hex');
  readonly #subnet: string;
  readonly #hosts = new Map<string, { ns: string; address: string }>();
  readonly #switchNs: string;
  #created: string[] = [];

  /** @param subnet the first three octets of the lab's /24, e.g. `10.213.7` */
  constructor(subnet: string) {
    this.#subnet = subnet;
    this.#switchNs = `fw${this.tag}-switch`;
  }

  /** Creates the bridge and one namespace per host, `hosts` mapping a host name to its last octet. */
  create(hosts: Readonly<Record<string, number>>): void {
    ip('netns', 'add', this.#switchNs);
    this.#created.push(this.#switchNs);
    ip('-n', this.#switchNs, 'link', 'add', 'br0', 'type', 'bridge');
    ip('-n', this.#switchNs, 'link', 'set', 'br0', 'up');
    let port = 0;
    for (const [host, octet] of Object.entries(hosts)) {
      const ns = `fw${this.tag}-${host}`;
      const address = `${this.#subnet}.${octet}`;
      ip('netns', 'add', ns);
      this.#created.push(ns);
      // Both ends are created inside namespaces: the switch's port and the host's eth0.
      const veth = `p${port++}`;
      ip('-n', this.#switchNs, 'link', 'add', veth, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns);
      ip('-n', this.#switchNs, 'link', 'set', veth, 'master', 'br0', 'up');
      ip('-n', ns, 'addr', 'add', `${address}/24`, 'dev', 'eth0');
      ip('-n', ns, 'link', 'set', 'eth0', 'up');
      ip('-n', ns, 'link', 'set', 'lo', 'up');
      this.#hosts.set(host, { ns, address });
    }
  }

  /** A host's address on the lab network. */
  address(host: string): string {
    const h = this.#hosts.get(host);
    if (!h) throw new Error(`no host ${host} in the lab`);
    return h.address;
  }

  /** The command line that runs a program inside a host's namespace. */
  launcher(host: string): string[] {
    const h = this.#hosts.get(host);
    if (!h) throw new Error(`no host ${host} in the lab`);
    return ['ip', 'netns', 'exec', h.ns];
  }

  /** The namespaces this lab created and has not removed yet. */
  get namespaces(): readonly string[] {
    return [...this.#created];
  }

  /**
   * Removes every namespace the lab created (their veths and the bridge go with them). Call it
   * after the processes inside have exited; safe to call twice.
   */
  destroy(): void {
    for (const ns of this.#created.splice(0).reverse()) {
      try {
        ip('netns', 'del', ns);
      } catch {
        // Already gone.
      }
    }
  }
}
