//! The least HTTP/1.1 a judge of a served model needs: one request per connection
//! (`Connection: close`) to a server the user runs on this machine or its LAN, plain http,
//! over `std::net::TcpStream`. No crate: hefprobe never downloads, so TLS, proxies, redirects
//! and pooling buy nothing, and every byte that comes back is bounded here: a connect timeout,
//! a silence timeout on every read, a deadline for the whole answer, a cap on the header and
//! on the body (content-length, chunked or read to close), a cap on each NDJSON line.

use crate::error::{Error, Result};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// The longest status line and header block accepted.
const MAX_HEADER: usize = 64 << 10;

/// Where the server is: `http://HOST[:PORT][/BASE]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
    /// A path prefix, without the trailing slash ("" for the root).
    pub base: String,
}

impl Endpoint {
    /// Parse the URL the user wrote; `what` names where (the `--backend` flag, a target).
    pub fn parse(url: &str, what: &str) -> Result<Self> {
        let bad = |msg: String| Error::input(format!("{what} url `{}`", crate::error::echo(url, 80)), msg);
        let rest =
            match url.split_once("://") {
                Some(("http", rest)) => rest,
                Some(("https", _)) => return Err(bad(
                    "https is not spoken: hefprobe talks plain http to a server on this machine or its LAN \
                     (hailo-ollama listens on http://HOST:8000)"
                        .into(),
                )),
                _ => return Err(bad("give http://HOST:PORT (e.g. http://127.0.0.1:8000)".into())),
            };
        let (authority, base) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => (
                h,
                p.parse::<u16>().map_err(|_| bad(format!("port `{p}` is not a number from 0 to 65535")))?,
            ),
            _ => (authority, 80),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() || port == 0 {
            return Err(bad("names no host and port; give http://HOST:PORT".into()));
        }
        Ok(Endpoint { host: host.to_string(), port, base: base.trim_end_matches('/').to_string() })
    }

    pub fn url(&self) -> String {
        format!("http://{}{}", self.authority(), self.base)
    }

    /// `HOST:PORT` as a Host header and a URL write it (an IPv6 address in brackets).
    fn authority(&self) -> String {
        let host = if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() };
        format!("{host}:{}", self.port)
    }
}

/// What one exchange may cost.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The longest the server may stay silent: connecting, and between any two reads.
    pub silence: Duration,
    /// The whole answer, from connecting to its last byte.
    pub deadline: Duration,
    /// The most body bytes accepted (a larger answer is refused, not held).
    pub max_body: usize,
}

/// A response's status, content type and (for [`request`]) body.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub content_type: String,
    pub body: Vec<u8>,
}

impl Response {
    /// The body as text for a message: its start, escaped.
    pub fn excerpt(&self) -> String {
        crate::error::echo(&String::from_utf8_lossy(&self.body[..self.body.len().min(400)]), 160)
    }
}

/// What went wrong talking to the server, worded for the user: a runtime failure (exit 3).
fn failed(ep: &Endpoint, msg: impl std::fmt::Display) -> Error {
    Error::Device(format!("server {}: {msg}", ep.url()))
}

/// An open exchange: the response's head read, its body still to come.
pub struct Exchange<'a> {
    ep: &'a Endpoint,
    pub status: u16,
    pub content_type: String,
    body: Body,
    reader: BufReader<TcpStream>,
    limits: Limits,
    start: Instant,
    read: usize,
}

enum Body {
    Length(usize),
    Chunked { left: usize, done: bool },
    ToClose,
}

/// Send `method path` with a JSON `body` and read the response head.
pub fn open<'a>(
    ep: &'a Endpoint,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
    limits: Limits,
) -> Result<Exchange<'a>> {
    let start = Instant::now();
    let addrs: Vec<_> = (ep.host.as_str(), ep.port)
        .to_socket_addrs()
        .map_err(|e| failed(ep, format!("cannot resolve `{}`: {e}", ep.host)))?
        .collect();
    let mut last = None;
    let mut stream = None;
    for a in &addrs {
        match TcpStream::connect_timeout(a, limits.silence) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let stream = stream.ok_or_else(|| {
        let why = last.map_or("no address".to_string(), |e| e.to_string());
        failed(ep, format!("cannot connect ({why}); is the server running and listening there?"))
    })?;
    stream.set_write_timeout(Some(limits.silence)).map_err(|e| failed(ep, e))?;
    let body = body.unwrap_or(&[]);
    let mut head = format!(
        "{method} {}{path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: hefprobe/{}\r\nAccept: */*\r\nConnection: close\r\n",
        ep.base,
        ep.authority(),
        env!("CARGO_PKG_VERSION")
    );
    if method == "POST" {
        head += &format!("Content-Type: application/json\r\nContent-Length: {}\r\n", body.len());
    }
    head += "\r\n";
    let mut w = &stream;
    w.write_all(head.as_bytes())
        .and_then(|_| w.write_all(body))
        .map_err(|e| failed(ep, format!("sending the request: {e}")))?;
    let reader = BufReader::new(stream);
    let mut x = Exchange {
        ep,
        status: 0,
        content_type: String::new(),
        body: Body::ToClose,
        reader,
        limits,
        start,
        read: 0,
    };
    x.read_head()?;
    Ok(x)
}

/// The whole response of one request, its body within `limits.max_body`.
pub fn request(
    ep: &Endpoint,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
    limits: Limits,
) -> Result<Response> {
    let mut x = open(ep, method, path, body, limits)?;
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = x.read_body(&mut buf)?;
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    Ok(Response { status: x.status, content_type: x.content_type, body: out })
}

impl Exchange<'_> {
    /// Arm the socket for the next read: the silence timeout, or what is left of the deadline.
    fn arm(&mut self) -> Result<()> {
        let left = self.limits.deadline.checked_sub(self.start.elapsed()).filter(|d| !d.is_zero());
        let Some(left) = left else {
            return Err(failed(
                self.ep,
                format!("no complete answer within {:?}; it is still sending", self.limits.deadline),
            ));
        };
        self.reader
            .get_ref()
            .set_read_timeout(Some(left.min(self.limits.silence)))
            .map_err(|e| failed(self.ep, e))
    }

    fn io(&self, e: std::io::Error) -> Error {
        use std::io::ErrorKind::{TimedOut, WouldBlock};
        if matches!(e.kind(), TimedOut | WouldBlock) {
            failed(
                self.ep,
                format!("silent for {:?} in the middle of its answer (a timeout)", self.limits.silence),
            )
        } else {
            failed(self.ep, format!("reading its answer: {e}"))
        }
    }

    /// One CRLF-terminated line of the head or of chunk framing, at most `MAX_HEADER` bytes.
    fn head_line(&mut self, total: &mut usize) -> Result<String> {
        let mut line = Vec::new();
        self.arm()?;
        let n = (&mut self.reader)
            .take((MAX_HEADER + 1 - *total) as u64)
            .read_until(b'\n', &mut line)
            .map_err(|e| self.io(e))?;
        *total += n;
        if *total > MAX_HEADER {
            return Err(failed(
                self.ep,
                format!(
                    "sent a header over {MAX_HEADER} bytes; it is not an HTTP server hefprobe can talk to"
                ),
            ));
        }
        if n == 0 {
            return Err(failed(self.ep, "closed the connection before its answer was complete"));
        }
        Ok(String::from_utf8_lossy(&line).trim_end_matches(['\r', '\n']).to_string())
    }

    fn read_head(&mut self) -> Result<()> {
        let mut total = 0;
        let status_line = self.head_line(&mut total)?;
        let mut parts = status_line.splitn(3, ' ');
        let (version, code) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        self.status = match (version.starts_with("HTTP/1."), code.parse::<u16>()) {
            (true, Ok(c)) => c,
            _ => {
                return Err(failed(
                    self.ep,
                    format!(
                        "answered `{}`, not HTTP/1.x; is this the server's port?",
                        crate::error::echo(&status_line, 60)
                    ),
                ))
            }
        };
        let (mut length, mut chunked) = (None, false);
        loop {
            let line = self.head_line(&mut total)?;
            if line.is_empty() {
                break;
            }
            let Some((name, value)) = line.split_once(':') else { continue };
            let value = value.trim();
            match name.trim().to_ascii_lowercase().as_str() {
                "content-length" => {
                    length = Some(value.parse::<usize>().map_err(|_| {
                        failed(self.ep, format!("sent Content-Length `{}`", crate::error::echo(value, 40)))
                    })?)
                }
                "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
                "content-type" => self.content_type = value.to_ascii_lowercase(),
                _ => {}
            }
        }
        self.body = match (chunked, length) {
            (true, _) => Body::Chunked { left: 0, done: false },
            (false, Some(n)) => {
                self.check_size(n)?;
                Body::Length(n)
            }
            (false, None) => Body::ToClose,
        };
        Ok(())
    }

    fn check_size(&self, n: usize) -> Result<()> {
        if n > self.limits.max_body {
            return Err(failed(
                self.ep,
                format!("sent more than {} bytes, more than any answer to this request could hold; hefprobe stopped reading", self.limits.max_body),
            ));
        }
        Ok(())
    }

    /// Body bytes into `buf` (0: the body is over), de-chunked, within the caps.
    pub fn read_body(&mut self, buf: &mut [u8]) -> Result<usize> {
        let want = match &mut self.body {
            Body::Length(0) => return Ok(0),
            Body::Length(n) => (*n).min(buf.len()),
            Body::Chunked { done: true, .. } => return Ok(0),
            Body::Chunked { left, .. } if *left > 0 => (*left).min(buf.len()),
            Body::Chunked { .. } => {
                self.next_chunk()?;
                return self.read_body(buf);
            }
            Body::ToClose => buf.len(),
        };
        self.arm()?;
        let n = self.reader.read(&mut buf[..want]).map_err(|e| self.io(e))?;
        match &mut self.body {
            Body::Length(left) | Body::Chunked { left, .. } => {
                if n == 0 {
                    return Err(failed(self.ep, "closed the connection in the middle of its answer"));
                }
                *left -= n;
            }
            Body::ToClose => {}
        }
        self.read += n;
        self.check_size(self.read)?;
        Ok(n)
    }

    /// The next chunk's size line (and the CRLF that ends the previous chunk's data); a zero
    /// chunk ends the body, its trailers read and dropped.
    fn next_chunk(&mut self) -> Result<()> {
        let mut total = 0;
        let mut line = self.head_line(&mut total)?;
        if line.is_empty() {
            line = self.head_line(&mut total)?;
        }
        let hex = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(hex, 16).map_err(|_| {
            failed(
                self.ep,
                format!("sent a chunk size `{}` that is not hexadecimal", crate::error::echo(hex, 20)),
            )
        })?;
        self.check_size(self.read.saturating_add(size))?;
        if size == 0 {
            while !self.head_line(&mut total)?.is_empty() {}
            self.body = Body::Chunked { left: 0, done: true };
        } else {
            self.body = Body::Chunked { left: size, done: false };
        }
        Ok(())
    }

    /// The body as lines (NDJSON): `each` is handed every non-empty line, without its line
    /// end, until it returns false or the body ends. A line is at most `max_line` bytes.
    pub fn lines(&mut self, max_line: usize, each: &mut dyn FnMut(&[u8]) -> Result<bool>) -> Result<()> {
        let mut pending: Vec<u8> = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            let n = self.read_body(&mut buf)?;
            if n == 0 {
                break;
            }
            pending.extend_from_slice(&buf[..n]);
            while let Some(i) = pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = pending.drain(..=i).collect();
                let line = line.trim_ascii();
                if !line.is_empty() && !each(line)? {
                    return Ok(());
                }
            }
            if pending.len() > max_line {
                return Err(failed(
                    self.ep,
                    format!("sent a line over {max_line} bytes; one streamed object is far smaller"),
                ));
            }
        }
        let last = pending.trim_ascii();
        if !last.is_empty() {
            each(last)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_host_port_and_base() {
        let e = Endpoint::parse("http://127.0.0.1:8000", "--backend").unwrap();
        assert_eq!((e.host.as_str(), e.port, e.base.as_str()), ("127.0.0.1", 8000, ""));
        let e = Endpoint::parse("http://pi.local/llm/", "t").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.base.as_str(), e.url()),
            ("pi.local", 80, "/llm", "http://pi.local:80/llm".into())
        );
        let e = Endpoint::parse("http://[::1]:8080", "t").unwrap();
        assert_eq!((e.host.as_str(), e.port, e.url()), ("::1", 8080, "http://[::1]:8080".to_string()));
        for (url, why) in [
            ("https://x:1", "https"),
            ("127.0.0.1:8000", "http://HOST:PORT"),
            ("http://x:99999", "port"),
            ("http://:80", "no host"),
        ] {
            let e = Endpoint::parse(url, "--backend serve").unwrap_err();
            assert!(e.exit_code() == 2 && e.to_string().contains(why), "{url}: {e}");
        }
    }
}
