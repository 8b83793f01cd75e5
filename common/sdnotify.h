/* sdnotify: systemd's readiness protocol without libsystemd. With
 * NOTIFY_SOCKET set (systemd does so for Type=notify units), a state such as
 * "READY=1" or "STOPPING=1" is sent as one datagram to that unix socket: a
 * path ("/run/systemd/notify") or an abstract name ("@name"). */
#ifndef CTUNE_SDNOTIFY_H
#define CTUNE_SDNOTIFY_H

/* Sends state to $NOTIFY_SOCKET. Returns 0 when sent or when NOTIFY_SOCKET
 * is unset or empty (nothing to tell), -EINVAL for an address that is neither
 * absolute nor abstract, -ENAMETOOLONG, or the socket's -errno. Failures are
 * logged once here (log.h), so a call site is one line. */
int sdnotify(const char *state);

#endif
