# SPDX-License-Identifier: BSD-3-Clause
# Included by every Makefile.am: flags every target shares.

NULL =

AM_CPPFLAGS = \
	-I$(top_srcdir)/common/utils \
	-I$(top_srcdir)/common/mdformat \
	-I$(top_srcdir)/common/replication \
	-I$(top_srcdir)/common/replication/pure \
	$(NULL)

# The engine (common/replication) lives in one folder per layer
# (layers.txt, lowest first).  The headers every layer shares (internal.h,
# engine.h, clock.h, nbdkit-calls.h) sit at its top, and its lowest
# layer (pure/) is below every other one: both are on every include path
# (the on-disk format's meta.h takes MAX_LEGS from pure/params.h too).
# The include path of a higher layer (ENGINE_*_INC) adds its own folder
# and the folders below it, so that a header of a higher layer cannot be
# included from a lower one.
ENGINE = $(top_srcdir)/common/replication
ENGINE_TRANSPORT_INC = -I$(ENGINE)/transport
ENGINE_MEMBERSHIP_INC = $(ENGINE_TRANSPORT_INC) -I$(ENGINE)/membership
ENGINE_DATAPATH_INC = $(ENGINE_MEMBERSHIP_INC) -I$(ENGINE)/datapath
ENGINE_BACKGROUND_INC = $(ENGINE_DATAPATH_INC) -I$(ENGINE)/background
ENGINE_CONTROL_INC = $(ENGINE_BACKGROUND_INC) -I$(ENGINE)/control
ENGINE_LIFECYCLE_INC = $(ENGINE_CONTROL_INC) -I$(ENGINE)/lifecycle
ENGINE_UBLK_INC = $(ENGINE_LIFECYCLE_INC) -I$(ENGINE)/ublk

# The engine's pure parsers of parameters and URIs (and the TLS setup of
# a libnbd handle), which nbdrep and the unit tests build from the
# sources, so that they read parameters exactly as the plugins do.
ENGINE_PARSERS = \
	$(ENGINE)/pure/params.c \
	$(ENGINE)/pure/params.h \
	$(ENGINE)/pure/params-text.c \
	$(ENGINE)/pure/params-text.h \
	$(ENGINE)/pure/uri.c \
	$(NULL)
ENGINE_TLS = $(ENGINE)/transport/tls.c $(ENGINE)/transport/tls.h

AM_CFLAGS = \
	$(WARNINGS_CFLAGS) \
	$(SANITIZER_CFLAGS) \
	$(PTHREAD_CFLAGS) \
	$(NULL)

AM_LDFLAGS = $(SANITIZER_CFLAGS)
