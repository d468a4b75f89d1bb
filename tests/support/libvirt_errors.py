"""A libvirtError with a chosen message, for unit tests that fake libvirt's failures.

libvirt-python's ``libvirtError(msg)`` takes its text from the calling thread's last
libvirt error when there is one (``virGetLastError``), not from ``msg``: after any real
libvirt call that failed earlier in the same test process (a connection refused, say), a
fake error would carry that old text. Resetting the thread's last error first makes the
fake say what the test means."""

import libvirt


def libvirt_error(message: str) -> libvirt.libvirtError:
    libvirt.virResetLastError()
    return libvirt.libvirtError(message)
