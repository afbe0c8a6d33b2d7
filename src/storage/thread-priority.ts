/**
 * Scheduling of the storage's worker threads (wal-checkpointer.ts, expiry-sweeper.ts), as source
 * text for their eval'd CommonJS code. Linux schedules threads one by one: `schedule(true)` puts
 * the calling thread at SCHED_IDLE (it runs when the core would otherwise be idle and yields at
 * once to any other thread that wakes), `schedule(false, niceness)` back at SCHED_OTHER with that
 * niceness. Node sets no policy itself, so chrt (util-linux) does it; where that fails (no chrt,
 * not Linux) the idle policy falls back to niceness 19. Never throws.
 */
export const SCHEDULE_SOURCE = `
function schedule(idle, niceness) {
  if (process.platform !== 'linux') return;
  try {
    const tid = require('node:fs').readlinkSync('/proc/thread-self').split('/').pop();
    require('node:child_process').execFileSync('chrt', [idle ? '--idle' : '--other', '--pid', '0', tid], {
      stdio: 'ignore',
      timeout: 5000,
    });
    if (!idle) require('node:os').setPriority(niceness);
  } catch {
    try {
      require('node:os').setPriority(idle ? 19 : niceness);
    } catch {}
  }
}
`;
