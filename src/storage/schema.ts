/**
 * The tables as Kysely sees them. Times are integer milliseconds since the epoch (UTC) and flags
 * are 0/1 integers, so that the same rows and queries work on SQLite and PostgreSQL.
 */
import type { Generated } from 'kysely';

export interface PasteTable {
  id: string;
  owner_key_id: string | null;
  title: string | null;
  description: string | null;
  content: string;
  content_type: 'text' | 'file';
  original_filename: string | null;
  language: string | null;
  file_size: number;
  sha256: string;
  created_at: number;
  expires_at: number | null;
  view_count: Generated<number>;
  burn_after_read: number;
  encrypted: number;
  downloadable: number;
  is_public: number;
  password_hash: string | null;
  source: 'api' | 'cli' | 'web';
  creator_ip: string | null;
}

export interface ApiKeyTable {
  id: string;
  name: string;
  digest: string;
  active: number;
  hourly_limit: number;
  daily_limit: number;
  monthly_limit: number;
  webhook_url: string | null;
  webhook_secret: string | null;
  webhook_active: Generated<number>;
  created_at: number;
}

export type DeliveryStatus = 'pending' | 'delivered' | 'failed' | 'gone';

export interface WebhookDeliveryTable {
  id: string;
  key_id: string;
  paste_id: string;
  url: string;
  payload: string;
  status: DeliveryStatus;
  attempts: number;
  next_attempt_at: number;
  locked_until: number | null;
  locked_by: string | null;
  last_status_code: number | null;
  last_error: string | null;
  created_at: number;
  finished_at: number | null;
}

export interface WebhookAttemptTable {
  id: string;
  delivery_id: string;
  attempted_at: number;
  status_code: number | null;
  error: string | null;
  duration_ms: number;
}

/** Views counted since they were last folded in: a narrow table, so counting is cheap. */
export interface PasteViewsTable {
  paste_id: string;
  views: number;
  /** The created_at of the paste counted: a paste made again under the id does not match. */
  created_at: number;
}

/** The tokens of view-count chunks written on PostgreSQL in the last hour (migration 0008). */
export interface ViewWriteTokensTable {
  token: string;
  /** Milliseconds since the epoch, by the database's clock. */
  written_at: number;
}

export interface Database {
  pastes: PasteTable;
  paste_views: PasteViewsTable;
  view_write_tokens: ViewWriteTokensTable;
  api_keys: ApiKeyTable;
  webhook_deliveries: WebhookDeliveryTable;
  webhook_attempts: WebhookAttemptTable;
}
