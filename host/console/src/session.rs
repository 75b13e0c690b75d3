//! Who is signed in: a session is a random id in an HttpOnly, Secure,
//! SameSite=Strict cookie, mapped here (in memory only) to the token it
//! signed in with and the value its forms must carry back (`csrf`).
//! Sessions end after [`IDLE`] without a request, at sign-out, or when the
//! table is full and they are the oldest; a restart signs everyone out.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::Rng;

/// A session unused this long is over.
pub const IDLE: Duration = Duration::from_secs(8 * 3600);
/// The most sessions held: past it, the least recently used goes.
pub const MAX_SESSIONS: usize = 4096;
/// The cookie's name.
pub const COOKIE: &str = "berth_console";

#[derive(Clone)]
pub struct Session {
    pub token: String,
    pub csrf: String,
    /// The token's name, shown in the page's header.
    pub who: String,
    used: Instant,
}

#[derive(Default)]
pub struct Sessions {
    by_id: Mutex<HashMap<String, Session>>,
}

/// 32 random bytes, as hex.
fn random_hex() -> String {
    let bytes: [u8; 32] = rand::rng().random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Sessions {
    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.by_id.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new session for `token`; returns its id.
    pub fn open(&self, token: String, who: String) -> String {
        let id = random_hex();
        let mut held = self.held();
        held.retain(|_, s| s.used.elapsed() < IDLE);
        if held.len() >= MAX_SESSIONS
            && let Some(oldest) = held.iter().min_by_key(|(_, s)| s.used).map(|(id, _)| id.clone())
        {
            held.remove(&oldest);
        }
        let session = Session {
            token,
            csrf: random_hex(),
            who,
            used: Instant::now(),
        };
        held.insert(id.clone(), session);
        id
    }

    /// The session a request's cookie names, if it is live.
    pub fn get(&self, headers: &http::HeaderMap) -> Option<Session> {
        let id = cookie(headers)?;
        let mut held = self.held();
        let session = held.get_mut(id)?;
        if session.used.elapsed() >= IDLE {
            held.remove(id);
            return None;
        }
        session.used = Instant::now();
        Some(session.clone())
    }

    pub fn close(&self, headers: &http::HeaderMap) {
        if let Some(id) = cookie(headers) {
            self.held().remove(id);
        }
    }
}

/// The session id in a request's `Cookie` headers.
fn cookie(headers: &http::HeaderMap) -> Option<&str> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
        .filter(|v| v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The `Set-Cookie` value that names session `id` (or ends it, with `None`).
pub fn set_cookie(id: Option<&str>) -> String {
    match id {
        Some(id) => format!("{COOKIE}={id}; Path=/; Secure; HttpOnly; SameSite=Strict"),
        None => format!("{COOKIE}=; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age=0"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_cookie(value: &str) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        h.insert(http::header::COOKIE, value.parse().unwrap());
        h
    }

    #[test]
    fn a_session_is_found_by_its_cookie_only_and_ends_at_sign_out() {
        let sessions = Sessions::default();
        let id = sessions.open("secret".into(), "alice".into());
        let headers = with_cookie(&format!("other=1; {COOKIE}={id}"));
        let s = sessions.get(&headers).unwrap();
        assert_eq!((s.token.as_str(), s.who.as_str()), ("secret", "alice"));
        assert_ne!(s.csrf, id);
        let forged = with_cookie(&format!("{COOKIE}={}", "0".repeat(64)));
        assert!(sessions.get(&forged).is_none());
        assert!(sessions.get(&with_cookie(&format!("{COOKIE}=../x"))).is_none());
        sessions.close(&headers);
        assert!(sessions.get(&headers).is_none());
    }

    #[test]
    fn the_table_is_bounded_by_dropping_the_least_recently_used() {
        let sessions = Sessions::default();
        let first = sessions.open("t".into(), "w".into());
        let second = sessions.open("t".into(), "w".into());
        for _ in 2..MAX_SESSIONS {
            sessions.open("t".into(), "w".into());
        }
        // Used now: the first is no longer the oldest.
        assert!(sessions.get(&with_cookie(&format!("{COOKIE}={first}"))).is_some());
        sessions.open("t".into(), "w".into());
        assert_eq!(sessions.held().len(), MAX_SESSIONS);
        assert!(sessions.get(&with_cookie(&format!("{COOKIE}={first}"))).is_some());
        assert!(
            sessions
                .get(&with_cookie(&format!("{COOKIE}={second}")))
                .is_none()
        );
    }
}
