# SPDX-License-Identifier: BSD-3-Clause
# Included by every Makefile.am: flags every target shares.

NULL =

AM_CPPFLAGS = \
	-I$(top_srcdir)/common/utils \
	-I$(top_srcdir)/common/mdformat \
	-I$(top_srcdir)/common/replication \
	$(NULL)

# The engine's pure parsers of parameters and URIs (and the TLS setup of
# a libnbd handle), which nbdrep and the unit tests build from the
# sources, so that they read parameters exactly as the plugins do.
ENGINE = $(top_srcdir)/common/replication
ENGINE_PARSERS = \
	$(ENGINE)/params.c \
	$(ENGINE)/params.h \
	$(ENGINE)/params-text.c \
	$(ENGINE)/params-text.h \
	$(ENGINE)/uri.c \
	$(NULL)
ENGINE_TLS = $(ENGINE)/tls.c $(ENGINE)/tls.h

AM_CFLAGS = \
	$(WARNINGS_CFLAGS) \
	$(SANITIZER_CFLAGS) \
	$(PTHREAD_CFLAGS) \
	$(NULL)

AM_LDFLAGS = $(SANITIZER_CFLAGS)
