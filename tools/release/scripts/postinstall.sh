#!/bin/sh
# The baton package's postinstall (deb: postinst configure [OLD]; rpm: %post 1|2).
# It makes the service's user and its state directory when missing and has systemd
# read the unit. It never enables or starts the service: the device must first be made
# as the baton user (baton init or baton join, below).
set -e

if ! getent passwd baton >/dev/null; then
	nologin=/usr/sbin/nologin
	[ -x "$nologin" ] || nologin=/sbin/nologin
	if getent group baton >/dev/null; then
		useradd --system --gid baton --home-dir /var/lib/baton --no-create-home --shell "$nologin" --comment "baton signer device" baton
	else
		useradd --system --user-group --home-dir /var/lib/baton --no-create-home --shell "$nologin" --comment "baton signer device" baton
	fi
fi
if [ ! -e /var/lib/baton ]; then
	install -d -o baton -g "$(id -gn baton)" -m 0700 /var/lib/baton
fi

if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
	if systemctl is-active --quiet baton.service; then
		echo "baton: the service still runs the binary it started with: systemctl restart baton when convenient (a standby takes the lease meanwhile)"
	fi
fi

if [ ! -e /var/lib/baton/data ]; then
	cat <<'MSG'
baton: installed; the service is neither enabled nor started. Make this device as
the baton user first, then start it:
  sudo -u baton baton init --new-chain --data /var/lib/baton/data   # a new chain's first device
  sudo -u baton baton join --data /var/lib/baton/data --invite-file - < invite   # or join one
  sudo systemctl enable --now baton
MSG
fi
exit 0
