"""What the tests share: fake upstreams and transports, servers started on loopback, the real
clients driven from the tests, SSE parsing, SDK validation, request fixtures. Test modules import
from here, never from one another."""
