//! MSI-X vectors as eventfds: how the vfio-user and vfio transports see interrupts.

use std::sync::Mutex;

use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use crate::DriverError;

/// One non-blocking eventfd per enabled MSI-X vector.
#[derive(Default)]
pub(crate) struct EventfdVectors {
    fds: Mutex<Vec<EventFd>>,
}

impl EventfdVectors {
    /// Replaces the vectors by `n` fresh eventfds and hands them to `install` (which gives them
    /// to the device); on failure no vector is enabled.
    pub(crate) fn replace(
        &self,
        n: u16,
        install: impl FnOnce(&[EventFd]) -> Result<(), DriverError>,
    ) -> Result<(), DriverError> {
        let mut fds = self.fds.lock().unwrap_or_else(|e| e.into_inner());
        fds.clear();
        for _ in 0..n {
            fds.push(
                EventFd::new(EFD_NONBLOCK).map_err(|e| DriverError::Transport(e.to_string()))?,
            );
        }
        let r = install(&fds);
        if r.is_err() {
            fds.clear();
        }
        r
    }

    /// Interrupts signalled on `vector` since the last call.
    pub(crate) fn take(&self, vector: u16) -> u64 {
        self.fds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(vector as usize)
            .and_then(|fd| fd.read().ok())
            .unwrap_or(0)
    }
}
