/**
 * One run of a named statement on a pg client that asks PostgreSQL to describe its rows only the
 * first time on each connection. pg's own Query sends Bind, Describe, Execute and Sync on every
 * run and parses the RowDescription that answers the Describe, a Field object and a type parser
 * looked up for each column, every time: the largest allocation on the PostgreSQL read path
 * (BENCHMARKS.md, the fifth session of 2026-11-26) and a message PostgreSQL builds every time.
 *
 * Here the description (column names and their parsers) is kept per connection and statement
 * name once seen. It stays true for as long as the statement stands: PostgreSQL never changes a
 * prepared statement's row type under it, it fails the run with 0A000 (cached plan must not
 * change result type) instead, and runNamed then gives the statement a new name, which is
 * described afresh. Rows are parsed with the same type parsers pg uses (pg.types, in text),
 * looked up when the statement is described: the global ones, set once before the pool exists
 * (database.ts); a client's own parsers (pg's `types` option) are not used here.
 *
 * It is a pg "submittable", as pg-cursor is: the client calls submit() when its turn comes and
 * the handle methods with the protocol's messages, then callback once.
 */
import { createRequire } from 'node:module';
import { parsedRowObjects } from './row-objects.js';

type TypeParser = (value: string) => unknown;

interface Description {
  parsers: TypeParser[];
  /** A row's object from its text fields (row-objects.ts). */
  toObject: (values: unknown[], parsers: TypeParser[]) => unknown;
}

/** The pg Connection methods and state a submittable uses (those pg-cursor uses). */
export interface PgConnection {
  parsedStatements: Record<string, string | undefined>;
  submittedNamedStatements?: Record<string, string | undefined>;
  stream: { cork?: () => void; uncork?: () => void };
  parse(query: { text: string; name: string; types: unknown[] }): void;
  bind(config: { portal: string; statement: string; values: unknown[] }): void;
  describe(message: { type: 'P'; name: string }): void;
  execute(config: { portal: string; rows: number }): void;
  sync(): void;
  sendCopyFail(message: string): void;
}

interface PgRuntime {
  types: { getTypeParser(oid: number, format: 'text'): TypeParser };
  prepareValue(value: unknown): unknown;
}

let runtime: PgRuntime | null = null;
/** pg's type parsers and value mapping, loaded when PostgreSQL is used (as pg itself is). */
function pgRuntime(): PgRuntime {
  if (!runtime) {
    const require = createRequire(import.meta.url);
    runtime = {
      types: require('pg').types,
      prepareValue: require('pg/lib/utils').prepareValue,
    };
  }
  return runtime;
}

/** The descriptions seen, per connection (pg's Connection object) and statement name. */
const described = new WeakMap<PgConnection, Map<string, Description>>();

export class DescribedStatement<R> {
  /** Set by the caller; pg wraps it for its query timeout. Called once. */
  callback: ((err: Error | null, rows?: R[]) => void) | undefined;
  private readonly rows: R[] = [];
  private description: Description | undefined;
  private connection: PgConnection | undefined;
  /** A row that could not be parsed: the run fails with it once the statement is done. */
  private failure: Error | null = null;

  constructor(
    readonly name: string,
    readonly text: string,
    private readonly values: unknown[],
  ) {}

  /** Runs on the client's turn; an Error returned is reported by the client through handleError. */
  submit(connection: PgConnection): Error | null {
    const known = connection.parsedStatements[this.name] ?? connection.submittedNamedStatements?.[this.name];
    if (known !== undefined && known !== this.text) {
      return new Error(`Prepared statements must be unique - '${this.name}' was used for a different statement`);
    }
    // The values first: one that cannot be sent fails the run before anything is written (the
    // client, given the error back, stays usable; thrown, it would wait for an answer for good).
    let values: unknown[];
    try {
      const { prepareValue } = pgRuntime();
      values = this.values.map((value) => prepareValue(value));
    } catch (err) {
      return err instanceof Error ? err : new Error(String(err));
    }
    this.connection = connection;
    this.description = known === undefined ? undefined : described.get(connection)?.get(this.name);
    // The messages go out in one write (as pg's Query sends them).
    connection.stream.cork?.();
    try {
      if (known === undefined) {
        connection.parse({ text: this.text, name: this.name, types: [] });
        if (connection.submittedNamedStatements) connection.submittedNamedStatements[this.name] = this.text;
      }
      connection.bind({ portal: '', statement: this.name, values });
      if (!this.description) connection.describe({ type: 'P', name: '' });
      connection.execute({ portal: '', rows: 0 });
      connection.sync();
    } finally {
      connection.stream.uncork?.();
    }
    return null;
  }

  handleRowDescription(message: { fields: Array<{ name: string; dataTypeID: number }> }): void {
    const { types } = pgRuntime();
    const description: Description = {
      parsers: message.fields.map((field) => types.getTypeParser(field.dataTypeID, 'text')),
      toObject: parsedRowObjects(message.fields.map((field) => field.name)),
    };
    this.description = description;
    if (!this.connection) return;
    let statements = described.get(this.connection);
    if (!statements) {
      statements = new Map();
      described.set(this.connection, statements);
    }
    statements.set(this.name, description);
  }

  handleDataRow(message: { fields: Array<string | null> }): void {
    if (this.failure) return;
    const description = this.description;
    if (!description) {
      this.failure = new Error(`a row of '${this.name}' came without its description`);
      return;
    }
    try {
      this.rows.push(description.toObject(message.fields, description.parsers) as R);
    } catch (err) {
      this.failure = err as Error;
    }
  }

  handleCommandComplete(): void {}

  handleEmptyQuery(): void {}

  handlePortalSuspended(): void {}

  handleReadyForQuery(): void {
    const callback = this.callback;
    this.callback = undefined;
    if (this.failure) callback?.(this.failure);
    else callback?.(null, this.rows);
  }

  handleError(err: Error): void {
    const callback = this.callback;
    this.callback = undefined;
    callback?.(err);
  }

  handleCopyInResponse(connection: PgConnection): void {
    connection.sendCopyFail('No source stream defined');
  }

  handleCopyData(): void {}
}

/** Runs the statement on the client: its rows, or the error PostgreSQL or pg reported. */
export function runDescribed<R>(
  client: { query(submittable: DescribedStatement<R>): unknown },
  name: string,
  text: string,
  values: unknown[],
): Promise<R[]> {
  return new Promise((resolve, reject) => {
    const statement = new DescribedStatement<R>(name, text, values);
    statement.callback = (err, rows) => {
      if (!err) {
        resolve(rows as R[]);
        return;
      }
      // A stack that leads back here rather than to the socket's read (as pg does for its own).
      Error.captureStackTrace(err);
      reject(err);
    };
    client.query(statement);
  });
}
