//! The kinds of failure and their HTTP statuses: the table's first column. Every refusal
//! (`refusal.rs`) has one kind; an [`crate::Error`] carries it.

/// What went wrong, as the protocol names it. Each kind has exactly one HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// 400: the document or request is not well formed.
    Malformed,
    /// 401: the request carries no usable `Authorization`.
    Unauthenticated,
    /// 402: the mailbox asks for a stamp or proof of work that is missing or insufficient.
    PaymentRequired,
    /// 403: a signature does not verify, the sender cannot be verified, or policy forbids it.
    Forbidden,
    /// 404: no such agent, route or record.
    NotFound,
    /// 405: the route exists but not with this method.
    MethodNotAllowed,
    /// 408: the request did not arrive in time (a server's read timeout); it may be sent again.
    Timeout,
    /// 409: the thing exists already, or its state does not allow this.
    Conflict,
    /// 410: the envelope or document has expired.
    Expired,
    /// 413: over a size limit.
    TooLarge,
    /// 421: sent to a house that is not the one it was meant for.
    Misdirected,
    /// 429: too many requests; try later.
    RateLimited,
    /// 431: the request's head (request line and header fields) is too large.
    HeadersTooLarge,
    /// 500: our fault. The reason is logged, never sent.
    Internal,
    /// 503: a dependency is down; try later.
    Unavailable,
    /// 503: the mailbox is moving between the house's databases (mailbox shards); try again
    /// shortly (the answer carries `Retry-After`). Temporary: a sending house retries it.
    MailboxMoving,
}

impl ErrorKind {
    /// The HTTP status and wire `code`.
    pub const fn code(self) -> u16 {
        match self {
            ErrorKind::Malformed => 400,
            ErrorKind::Unauthenticated => 401,
            ErrorKind::PaymentRequired => 402,
            ErrorKind::Forbidden => 403,
            ErrorKind::NotFound => 404,
            ErrorKind::MethodNotAllowed => 405,
            ErrorKind::Timeout => 408,
            ErrorKind::Conflict => 409,
            ErrorKind::Expired => 410,
            ErrorKind::TooLarge => 413,
            ErrorKind::Misdirected => 421,
            ErrorKind::RateLimited => 429,
            ErrorKind::HeadersTooLarge => 431,
            ErrorKind::Internal => 500,
            ErrorKind::Unavailable | ErrorKind::MailboxMoving => 503,
        }
    }

    /// A stable machine name for the wire `error` field.
    pub const fn slug(self) -> &'static str {
        match self {
            ErrorKind::Malformed => "malformed",
            ErrorKind::Unauthenticated => "unauthenticated",
            ErrorKind::PaymentRequired => "payment_required",
            ErrorKind::Forbidden => "forbidden",
            ErrorKind::NotFound => "not_found",
            ErrorKind::MethodNotAllowed => "method_not_allowed",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Expired => "expired",
            ErrorKind::TooLarge => "too_large",
            ErrorKind::Misdirected => "misdirected",
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::HeadersTooLarge => "headers_too_large",
            ErrorKind::Internal => "internal",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::MailboxMoving => "mailbox_moving",
        }
    }

    /// Every kind, for tables and tests. A code shared by two kinds reads back as the first.
    pub const ALL: [ErrorKind; 16] = [
        ErrorKind::Malformed,
        ErrorKind::Unauthenticated,
        ErrorKind::PaymentRequired,
        ErrorKind::Forbidden,
        ErrorKind::NotFound,
        ErrorKind::MethodNotAllowed,
        ErrorKind::Timeout,
        ErrorKind::Conflict,
        ErrorKind::Expired,
        ErrorKind::TooLarge,
        ErrorKind::Misdirected,
        ErrorKind::RateLimited,
        ErrorKind::HeadersTooLarge,
        ErrorKind::Internal,
        ErrorKind::Unavailable,
        ErrorKind::MailboxMoving,
    ];

    /// Whether a relaying house should retry (spec §6: 421, 429 and 5xx are temporary; so is
    /// 408, a request that arrived too slowly).
    pub const fn is_temporary(self) -> bool {
        matches!(
            self,
            ErrorKind::Timeout
                | ErrorKind::Misdirected
                | ErrorKind::RateLimited
                | ErrorKind::Internal
                | ErrorKind::Unavailable
                | ErrorKind::MailboxMoving
        )
    }

    /// The kind for a wire code, if it is one of ours.
    pub fn from_code(code: u16) -> Option<ErrorKind> {
        ErrorKind::ALL.into_iter().find(|k| k.code() == code)
    }
}
