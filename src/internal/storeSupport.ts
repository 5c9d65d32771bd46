/**
 * What every store shares below `SessionStore`: the session id's pattern and the span attributes of a store operation.
 *
 * @internal
 */

/** A valid session id: a letter or digit, then up to 127 letters, digits, `.`, `_` or `-`. */
export const SESSION_ID: RegExp = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/

/** True when `sessionId` is a valid session id (see `SessionStore.validateSessionId`). */
export const isSessionId = (sessionId: string): boolean => SESSION_ID.test(sessionId)

/** The span attributes of a store operation. */
export const spanAttributes = (
  store: string,
  sessionId: string,
  extra: Readonly<Record<string, number>> = {}
): Record<string, unknown> => ({ "session.store": store, "session.id": sessionId, ...extra })
