// What the benches read about processes and the machine from /proc, and the percentile they print.
import { readFileSync } from 'node:fs';

/** CPU time (user + system) the whole machine has been busy so far, ms summed over cores. */
export function machineBusyMs(): number {
  const line = readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '';
  const cpu = line.trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal: busy is everything but idle and iowait.
  const busy = cpu.reduce((a, x) => a + x, 0) - (cpu[3] ?? 0) - (cpu[4] ?? 0);
  return (busy * 1000) / 100;
}

/** CPU time (user + system) a process has used so far, ms (`/proc/<pid>/stat`); 0 once it is gone. */
export function cpuMs(pid: number | undefined): number {
  if (pid === undefined) return 0;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100;
  } catch {
    return 0;
  }
}

/**
 * Time a process's main thread (its event loop) has spent runnable but waiting for a CPU, ms
 * (`/proc/<pid>/schedstat`): what CPU contention with the other processes cost it.
 */
export function runWaitMs(pid: number | undefined): number {
  if (pid === undefined) return 0;
  try {
    return Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[1]) / 1e6;
  } catch {
    return 0;
  }
}

/** The `p`th percentile (0-100, nearest rank) of `xs`; NaN when empty. */
export function pct(xs: readonly number[], p: number): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] as number;
}
