/**
 * The one presenter: turns a stored paste into what the API's create, detail, list and update
 * answers show (and, later, the webhook body), with every address built from BASE_URL.
 */
import { formatTimestamp } from '../clock.js';
import type { OwnedListItem } from '../storage/paste-repository.js';
import { isDownloadable, type Paste } from './paste.js';

const timestamp = (ms: number | null): string | null => (ms === null ? null : formatTimestamp(ms));

export class PastePresenter {
  constructor(readonly baseUrl: string) {}

  viewUrl(id: string, key?: string): string {
    return `${this.baseUrl}/view/${id}${key ? `#${key}` : ''}`;
  }

  rawUrl(id: string): string {
    return `${this.baseUrl}/raw/${id}`;
  }

  downloadUrl(paste: Pick<Paste, 'id' | 'encrypted' | 'downloadable'>): string | null {
    return isDownloadable(paste as Paste) ? `${this.baseUrl}/download/${paste.id}` : null;
  }

  /** `data` of a 201 from POST /api/v1/paste (and of quick-create's JSON answer). */
  created(paste: Paste, request: { key?: string | undefined; downloadable: boolean; encrypt: boolean }) {
    const data: Record<string, unknown> = {
      paste_id: paste.id,
      url: this.viewUrl(paste.id, request.key),
      raw_url: this.rawUrl(paste.id),
      download_url: this.downloadUrl(paste),
      expires_at: timestamp(paste.expiresAt),
      sha256: paste.sha256,
      burn_after_read: paste.burnAfterRead,
      encrypted: paste.encrypted,
      downloadable: isDownloadable(paste),
    };
    if (request.downloadable && !request.encrypt) {
      data.warning = 'downloadable has no effect on a paste that is not encrypted: it is always downloadable.';
    }
    return data;
  }

  /** `data` of GET /api/v1/paste/{id}. */
  detail(paste: Paste, burned: boolean) {
    return {
      paste_id: paste.id,
      title: paste.title,
      description: paste.description,
      content: paste.content,
      content_type: paste.contentType,
      original_filename: paste.originalFilename,
      language: paste.language,
      file_size: paste.fileSize,
      sha256: paste.sha256,
      created_at: formatTimestamp(paste.createdAt),
      expires_at: timestamp(paste.expiresAt),
      view_count: paste.viewCount,
      burn_after_read: paste.burnAfterRead,
      burned,
      encrypted: paste.encrypted,
      downloadable: isDownloadable(paste),
    };
  }

  /** The answer of GET /api/v1/pastes but for its `error: false`: a page of the owner's pastes. */
  listPage(items: OwnedListItem[], page: number, limit: number, total: number) {
    return {
      data: items.map((item) => this.listItem(item)),
      pagination: { page, limit, total, total_pages: Math.ceil(total / limit) },
    };
  }

  /** An element of GET /api/v1/pastes. */
  listItem(paste: OwnedListItem) {
    return {
      paste_id: paste.id,
      url: this.viewUrl(paste.id),
      title: paste.title,
      content_type: paste.contentType,
      language: paste.language,
      file_size: paste.fileSize,
      created_at: formatTimestamp(paste.createdAt),
      expires_at: timestamp(paste.expiresAt),
      view_count: paste.viewCount,
      encrypted: paste.encrypted,
      downloadable: isDownloadable(paste),
    };
  }

  /** The body of the paste_created webhook (api-v1.md, Events; D4, D10, D21). */
  webhookEvent(paste: Paste, keyName: string) {
    return {
      event: 'paste_created',
      paste_id: paste.id,
      type: paste.contentType,
      source: paste.source,
      api_key_name: keyName,
      url: this.viewUrl(paste.id),
      raw_url: this.rawUrl(paste.id),
      download_url: this.downloadUrl(paste),
      expires_at: timestamp(paste.expiresAt),
      created_at: formatTimestamp(paste.createdAt),
      ip: paste.creatorIp,
    };
  }

  /** `data` of PUT /api/v1/paste/{id}. */
  updated(paste: Paste, key?: string) {
    return { paste_id: paste.id, url: this.viewUrl(paste.id, key), encrypted: paste.encrypted };
  }
}
