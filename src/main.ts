/**
 * Starting and stopping the server: read the config, open and migrate storage, build the app,
 * listen, run the expiry sweep, and close cleanly on SIGTERM/SIGINT.
 */
import { buildApp, createLogger } from './app.js';
import { asDatabaseUrlRefusal } from './cli/refusals.js';
import type { Config } from './config.js';
import { tuneHeapFor } from './heap-growth.js';
import { createServices } from './services.js';
import { openStorage } from './storage/database.js';
import { migrateToLatest } from './storage/migrations.js';

export async function serve(config: Config): Promise<void> {
  tuneHeapFor(config.databaseUrl);
  const storage = await asDatabaseUrlRefusal(async () =>
    openStorage(config.databaseUrl, { backgroundCheckpoints: true, soleServer: true }),
  );
  await asDatabaseUrlRefusal(() => migrateToLatest(storage));
  const logger = createLogger(config.logLevel);
  const services = await createServices(storage, { config, logger });
  const app = await buildApp({ config, services, logger });
  services.webhookWorker.start();

  // D12: expired pastes answer 404 at once; this removes their rows within minutes. Webhook
  // deliveries finished more than WEBHOOK_RETENTION_DAYS ago go with them.
  const sweep = async () => {
    try {
      const removed = await services.pastes.sweepExpired();
      if (removed > 0) app.log.info({ removed }, 'expired pastes removed');
    } catch (err) {
      app.log.error({ err }, 'expiry sweep failed');
    }
    try {
      const removed = await services.webhookWorker.pruneFinished();
      if (removed > 0) app.log.info({ removed }, 'finished webhook deliveries removed');
    } catch (err) {
      app.log.error({ err }, 'webhook delivery pruning failed');
    }
  };
  const sweeper = setInterval(sweep, config.sweepIntervalMs);
  sweeper.unref();
  void sweep();

  let closing = false;
  const shutdown = async (signal: string) => {
    if (closing) return;
    closing = true;
    app.log.info({ signal }, 'shutting down');
    clearInterval(sweeper);
    // Stop accepting and finish the requests in flight, then write what is held in memory and let
    // the webhook worker finish its attempts and give back its claims. Each step is taken even if
    // one before it failed (the storage refusing writes, say); the exit code says whether all went well.
    let clean = true;
    const step = async (name: string, run: () => Promise<unknown>) => {
      try {
        if ((await run()) === false) clean = false;
      } catch (err) {
        clean = false;
        app.log.error({ err, step: name }, 'shutdown failed');
      }
    };
    // A request may run for up to REQUEST_TIMEOUT_SECONDS (a slow upload), longer than a
    // supervisor waits before it kills the process, and the counts held in memory would go with
    // it: the connections of those still running after SHUTDOWN_TIMEOUT_SECONDS are closed (an
    // upload cut is not stored). The work of a request whose body was whole (a create waiting
    // for its commit) still ends before the services and the storage close (the app's onClose,
    // requests-in-flight.ts), then the steps after it take their turn.
    const deadline = setTimeout(() => {
      app.server.getConnections((_err, connections) => {
        app.log.warn(
          { connections, afterMs: config.shutdownTimeoutMs },
          'requests still in flight at the shutdown deadline: their connections closed',
        );
        app.server.closeAllConnections();
      });
    }, config.shutdownTimeoutMs);
    await step('requests', () => app.close());
    clearTimeout(deadline);
    await step('services', () => services.close());
    await step('storage', () => storage.close());
    process.exit(clean ? 0 : 1);
  };
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));

  try {
    await app.listen({ port: config.port, host: config.host });
  } catch (err) {
    // The address refused (a name that does not resolve, an address not this machine's, a port
    // in use): the one line names the settings that chose it (D2).
    // What was started is stopped first: the webhook worker's claims given back, not left to
    // their lease while this process exits. Unless a signal's shutdown is already doing it; one
    // coming now finds it done.
    const shuttingDown = closing;
    closing = true;
    if (!shuttingDown) {
      clearInterval(sweeper);
      await services.close().catch(() => {});
      await storage.close().catch(() => {});
    }
    const code = (err as { code?: unknown }).code;
    if (typeof code !== 'string') throw err;
    const why = (err as Error).message || code;
    throw Object.assign(new Error(`cannot listen on HOST ${config.host}, PORT ${config.port}: ${why}`), { code });
  }
}
