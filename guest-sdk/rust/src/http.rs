//! Outbound HTTP (ABI 0.2, ABI.md §4.14–4.15).

use crate::abi::{self, HeadersBuilder};
use crate::error::{check, Errno, Error};
use crate::sys;

/// An outbound HTTP request for [`http_request`]. Build one with [`HttpRequest::get`],
/// [`post`](HttpRequest::post) or [`new`](HttpRequest::new) and the builder methods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpRequest {
    /// The method, e.g. `"GET"` or `"POST"` (upper case); `""` means `"GET"`.
    pub method: String,
    /// An absolute `http://` or `https://` URL whose host is on the task's allowlist.
    pub url: String,
    /// The request headers, sent in order.
    pub headers: HeadersBuilder,
    /// The request body (empty for none).
    pub body: Vec<u8>,
    /// The timeout in ms; 0 means the task's default. The host caps it at the task's maximum.
    pub timeout_ms: u32,
}

impl HttpRequest {
    /// A request with this method and URL, no headers, no body and the default timeout.
    pub fn new(method: impl Into<String>, url: impl Into<String>) -> HttpRequest {
        HttpRequest {
            method: method.into(),
            url: url.into(),
            headers: HeadersBuilder::new(),
            body: Vec::new(),
            timeout_ms: 0,
        }
    }

    /// A `GET` request.
    pub fn get(url: impl Into<String>) -> HttpRequest {
        HttpRequest::new("GET", url)
    }

    /// A `POST` request with this body.
    pub fn post(url: impl Into<String>, body: impl Into<Vec<u8>>) -> HttpRequest {
        HttpRequest::new("POST", url).body(body)
    }

    /// Adds a header.
    pub fn header(mut self, name: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> HttpRequest {
        self.headers.add(name, value);
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> HttpRequest {
        self.body = body.into();
        self
    }

    /// Sets the timeout in ms (0: the task's default).
    pub fn timeout_ms(mut self, ms: u32) -> HttpRequest {
        self.timeout_ms = ms;
        self
    }

    /// Appends the request's HttpRequest layout (ABI.md §6.9).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let method: &str = if self.method.is_empty() {
            "GET"
        } else {
            &self.method
        };
        abi::encode_http_request(
            out,
            &abi::HttpRequest {
                method: method.as_bytes(),
                url: self.url.as_bytes(),
                headers: self.headers.headers(),
                body: &self.body,
                timeout_ms: self.timeout_ms,
            },
        );
    }
}

/// The response to an [`HttpRequest`]; it owns its bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HttpResponse {
    /// The HTTP status code, e.g. 200 or 404.
    pub status: u32,
    /// The response headers, in the order the host gave them.
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    /// The whole response body.
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// A response with this status, no headers and no body.
    pub fn new(status: u32) -> HttpResponse {
        HttpResponse {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// Adds a header (builder style, for tests and stubs).
    pub fn with_header(mut self, name: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> HttpResponse {
        self.headers
            .push((name.as_ref().to_vec(), value.as_ref().to_vec()));
        self
    }

    /// Sets the body (builder style, for tests and stubs).
    pub fn with_body(mut self, body: impl Into<Vec<u8>>) -> HttpResponse {
        self.body = body.into();
        self
    }

    /// The value of the first header called `name`, compared case-insensitively (ASCII).
    pub fn header(&self, name: impl AsRef<[u8]>) -> Option<&[u8]> {
        let name = name.as_ref();
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| &v[..])
    }

    /// The body as UTF-8 text.
    pub fn body_str(&self) -> Result<&str, Error> {
        Ok(std::str::from_utf8(&self.body)?)
    }

    /// A copy of a decoded HttpResponse layout.
    pub fn from_layout(r: &abi::HttpResponse<'_>) -> HttpResponse {
        HttpResponse {
            status: r.status,
            headers: r
                .headers
                .iter()
                .map(|(n, v)| (n.to_vec(), v.to_vec()))
                .collect(),
            body: r.body.to_vec(),
        }
    }

    /// Appends the response's HttpResponse layout (ABI.md §6.10).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut hb = HeadersBuilder::new();
        for (n, v) in &self.headers {
            hb.add(n, v);
        }
        abi::encode_http_response(
            out,
            &abi::HttpResponse {
                status: self.status,
                headers: hb.headers(),
                body: &self.body,
            },
        );
    }
}

/// The response buffer starts at this size; a larger response is fetched with `http_response`.
const RESP_BUF: usize = 16 << 10;

/// Sends `req` and waits for the response, the request's timeout or the task's limits. A response
/// of any status (404, 500…) is a success: check [`HttpResponse::status`]. The request is not part
/// of the call's atomic effects: when a failed call is retried, its requests are sent again.
///
/// Needs a grant: fails with `ERR_NOT_ALLOWED` when the task has no HTTP grant, the URL's host is
/// not on its allowlist, or during init; with `ERR_UNAVAILABLE` when the connection failed, the
/// request timed out or the host is stopping; with `ERR_INVALID` for a malformed method or URL;
/// with `ERR_TOO_LARGE` for a request or response body over the task's limit.
pub fn http_request(req: &HttpRequest) -> Result<HttpResponse, Error> {
    let mut layout = Vec::new();
    req.encode(&mut layout);
    let mut buf = vec![0u8; RESP_BUF];
    let n = check(sys::host_http_request(&layout, &mut buf))? as usize;
    if n <= buf.len() {
        buf.truncate(n);
    } else {
        // Too big for the buffer: the host kept it for http_response.
        buf = vec![0u8; n];
        let m = check(sys::host_http_response(&mut buf))? as usize;
        if m != n {
            return Err(Error::with_code(
                Errno::INTERNAL,
                "http_response: the kept response changed length",
            ));
        }
    }
    match abi::decode_http_response(&buf) {
        Ok(r) => Ok(HttpResponse::from_layout(&r)),
        Err(_) => Err(Error::with_code(
            Errno::INTERNAL,
            "http_request: malformed HttpResponse from the host",
        )),
    }
}
