/**
 * The one error type of fastpaste (D7). Every refusal anywhere in the code is an AppError with a
 * stable code; the status comes from one table, and one presenter (http/error-presenter.ts)
 * renders it as the JSON envelope or as a web page.
 */

export const ERROR_STATUS = {
  invalid_request: 400,
  content_too_short: 400,
  invalid_ciphertext: 400,
  file_type_not_allowed: 400,
  content_rejected: 400,
  api_key_missing: 401,
  api_key_invalid: 403,
  password_protected: 403,
  wrong_password: 403,
  forbidden: 403,
  not_downloadable: 403,
  not_found: 404,
  method_not_allowed: 405,
  request_timeout: 408,
  expectation_failed: 417,
  content_too_large: 413,
  file_too_large: 413,
  rate_limited: 429,
  too_many_attempts: 429,
  headers_too_large: 431,
  internal_error: 500,
  api_disabled: 503,
  service_unavailable: 503,
  shutting_down: 503,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;

/** One invalid field of a request, as listed in the envelope's `details`. */
export interface FieldProblem {
  field: string;
  message: string;
}

export class AppError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly details: FieldProblem[] | undefined;
  /** Extra response headers (Allow on 405, Retry-After on 429). */
  readonly headers: Record<string, string>;

  constructor(
    code: ErrorCode,
    message: string,
    options: { details?: FieldProblem[]; headers?: Record<string, string> } = {},
  ) {
    super(message);
    this.name = 'AppError';
    this.code = code;
    this.status = ERROR_STATUS[code];
    this.details = options.details;
    this.headers = options.headers ?? {};
  }
}

/** A validation failure: 400 invalid_request naming each field that is wrong. */
export function invalidRequest(details: FieldProblem[], message?: string): AppError {
  const first = details[0];
  return new AppError(
    'invalid_request',
    message ?? (first ? `Invalid field "${first.field}": ${first.message}.` : 'The request is invalid.'),
    { details },
  );
}

export function notFound(): AppError {
  return new AppError('not_found', 'The paste does not exist or has expired.');
}
