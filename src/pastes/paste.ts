/** A stored paste as the domain sees it. */
export interface Paste {
  id: string;
  ownerKeyId: string | null;
  title: string | null;
  description: string | null;
  content: string;
  contentType: 'text' | 'file';
  originalFilename: string | null;
  language: string | null;
  fileSize: number;
  sha256: string;
  createdAt: number;
  expiresAt: number | null;
  viewCount: number;
  burnAfterRead: boolean;
  encrypted: boolean;
  /** As stored; a non-encrypted paste is always downloadable whatever this says (D16). */
  downloadable: boolean;
  /** Asked for at creation; listed only when no password, burn or encryption applies (D22). */
  public: boolean;
  passwordHash: string | null;
  source: 'api' | 'cli' | 'web';
  creatorIp: string | null;
}

/** A non-encrypted paste is always downloadable (D16). */
export function isDownloadable(paste: Pick<Paste, 'encrypted' | 'downloadable'>): boolean {
  return !paste.encrypted || paste.downloadable;
}

/** D22: only plain public pastes ever reach the archive and the sitemap. */
export function isListedPublicly(paste: Paste): boolean {
  return paste.public && paste.passwordHash === null && !paste.burnAfterRead && !paste.encrypted;
}
