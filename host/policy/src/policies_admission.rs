//! The admission decision as the manager asks it: by the module serving
//! it, else admitted as asked (the built-in policy admits everything).

use crate::logged::{Answer, Input, Logged};
use crate::policies::settings_of;
use crate::{AdmissionRequest, AdmissionVerdict, Decision, Policies, PolicyError, admission_call_name};

impl Policies {
    /// Whether any module (serving or shadowing) decides admission: without
    /// one, every request is admitted and nothing is asked or logged.
    pub fn admits_everything(&self) -> bool {
        self.module(Decision::Admission).is_none() && self.shadow(Decision::Admission).is_none()
    }

    /// Whether `request` is admitted, and with what changes; the decision
    /// as the decision log keeps it. `request.settings` is filled in here.
    pub async fn admit_logged(
        &self,
        mut request: AdmissionRequest,
    ) -> (Result<AdmissionVerdict, PolicyError>, Logged) {
        let module = self.module(Decision::Admission);
        request.settings = settings_of(module.as_deref());
        let volume = request.volume.name.clone();
        let (answer, served) = self
            .decide(
                Decision::Admission,
                (&volume, admission_call_name(&request.call)),
                async |m| m.admit(self.engine(), &request).await,
                || AdmissionVerdict::Allow,
            )
            .await;
        let logged = served.logged(
            volume,
            Input::Admission(request),
            answer.as_ref().ok().cloned().map(Answer::Admission),
        );
        self.to_shadow(&logged);
        (answer, logged)
    }
}
