import type { CallEntry } from "../api/client";

export interface Run {
  key: string;
  pool_index: number;
  attempts: CallEntry[]; // oldest first
}

/** Group attempts into runs: a run starts at attempt 1 of loop iteration 0 for a pool member,
 * and its retries and later loop iterations follow it. Returns the newest run first. */
export function groupRuns(calls: CallEntry[]): Run[] {
  const oldestFirst = [...calls].sort((a, b) => a.attempted_at.localeCompare(b.attempted_at));
  const open = new Map<number, Run>();
  const runs: Run[] = [];
  for (const call of oldestFirst) {
    const current = open.get(call.pool_index);
    const starts = call.attempt === 1 && call.loop_iteration === 0;
    if (!current || starts) {
      const run = {
        key: `${call.pool_index}-${call.attempted_at}`,
        pool_index: call.pool_index,
        attempts: [call],
      };
      open.set(call.pool_index, run);
      runs.push(run);
    } else {
      current.attempts.push(call);
    }
  }
  return runs.reverse();
}

/** A run's outcome: the state of its last attempt. */
export function runState(run: Run): string {
  return run.attempts[run.attempts.length - 1]?.state ?? "running";
}
