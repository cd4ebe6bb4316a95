/**
 * The order in which members resumed together thaw in the driver: those
 * with no pool data (a launcher) only once the others have thawed and
 * pinned their staging. All at once, the 2-rank job's driver restores
 * took 0.51 and 0.72 s beside the launcher's 0.21 s, one rank's 0.40 s
 * beside its launcher's 0.14 s (2x H200; two ranks' alone slow each other
 * 10-20 %, test/gpu/probes/driver_pair.c); right after theirs, it slowed
 * their remap and pinning (0.14-0.16 s against 0.04 s). The launcher's
 * restore holds up nothing that runs.
 */
export class ThawOrder {
  /** Members with data not yet through their driver's part, or that have not said yet. */
  private pending: number;
  private readonly waiters: (() => void)[] = [];

  constructor(members: number) {
    this.pending = members;
  }

  /** One member's turn; its done() must be called however its resume ends. */
  member(): ThawTurn {
    let counted = true;
    const leave = () => {
      if (!counted) return;
      counted = false;
      if (--this.pending === 0) for (const w of this.waiters.splice(0)) w();
    };
    return {
      wait: async (empty: boolean) => {
        if (!empty) return;
        leave();
        if (this.pending > 0) await new Promise<void>((r) => this.waiters.push(r));
      },
      done: leave,
    };
  }
}

export interface ThawTurn {
  /** Resolves when this member may thaw: at once for one with pool data (empty: false). */
  wait(empty: boolean): Promise<void>;
  /** This member is through its driver's part (thawed, its staging pinned), or will not be: idempotent. */
  done(): void;
}
