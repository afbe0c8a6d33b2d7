/** SQL for API keys. No rules here: those live in keys/key-service.ts. */
import type { Kysely, Selectable } from 'kysely';
import { preparedQuery } from './prepared-query.js';
import type { ApiKeyTable, Database } from './schema.js';

export type ApiKeyRow = Selectable<ApiKeyTable>;

export class KeyRepository {
  private readonly findByDigestQuery;

  constructor(private readonly db: Kysely<Database>) {
    this.findByDigestQuery = preparedQuery(db, ['string'], (digest: string) =>
      db.selectFrom('api_keys').selectAll().where('digest', '=', digest),
    );
  }

  async insert(row: ApiKeyRow): Promise<void> {
    await this.db.insertInto('api_keys').values(row).execute();
  }

  async findByDigest(digest: string): Promise<ApiKeyRow | undefined> {
    const [row] = await this.findByDigestQuery(digest);
    return row;
  }

  async findById(id: string): Promise<ApiKeyRow | undefined> {
    return this.db.selectFrom('api_keys').selectAll().where('id', '=', id).executeTakeFirst();
  }

  async list(): Promise<ApiKeyRow[]> {
    return this.db.selectFrom('api_keys').selectAll().orderBy('created_at').orderBy('id').execute();
  }

  /** Returns whether a key with that id existed. */
  async update(id: string, changes: Partial<Omit<ApiKeyRow, 'id' | 'digest' | 'created_at'>>): Promise<boolean> {
    const result = await this.db.updateTable('api_keys').set(changes).where('id', '=', id).executeTakeFirst();
    return Number(result.numUpdatedRows) > 0;
  }
}
