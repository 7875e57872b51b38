"""A real SMTP server for tests/notify_email.rs: aiosmtpd (Debian's python3-aiosmtpd, installed
by .ci/run) on 127.0.0.1, plain SMTP (loopback only). Every message it accepts is appended to
OUT as one JSON line (envelope sender, recipients, the raw message), in the order accepted.
A recipient whose address starts with "refused" is answered 550 (a permanent refusal).

Usage: smtp_sink.py OUT PORT   (PORT 0: any free port). Prints "listening PORT" once ready.
"""
import asyncio
import json
import sys

from aiosmtpd.smtp import SMTP


class Sink:
    def __init__(self, out):
        self.out = out

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address.startswith("refused"):
            return "550 5.1.1 no such mailbox here"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        line = json.dumps(
            {
                "from": envelope.mail_from,
                "to": envelope.rcpt_tos,
                "data": envelope.original_content.decode("utf-8", "replace"),
            }
        )
        with open(self.out, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
        return "250 Message accepted for delivery"


async def main(out, port):
    loop = asyncio.get_running_loop()
    handler = Sink(out)
    server = await loop.create_server(
        lambda: SMTP(handler, hostname="smtp.test"), "127.0.0.1", port, reuse_address=True
    )
    print("listening", server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
